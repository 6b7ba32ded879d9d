"""The image manifests (catalog/images.yaml): every image lists every component, every shipped component
names a public source, and the per-component decision follows what each image ships."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.catalog import aws as aws_rules
from gpufleet.catalog.images import (
    COMPONENTS,
    FABRIC_COMPONENTS,
    PERSISTENCE,
    ImageManifest,
    ShippedComponent,
    component_modes,
    component_paths,
    gcp_manifest_key,
    load_image_manifests,
    manifest,
)

MANIFESTS = load_image_manifests()
# The role components: what nvidia_driver, cuda_toolkit, nccl and gpu_health (DCGM) decide on.
ROLES = ("driver", "cuda", "nccl", "dcgm")


def test_the_supported_base_images_are_all_there():
    assert set(MANIFESTS.images) == {
        "dlami-base-oss-ubuntu-22.04",
        "dlami-base-oss-ubuntu-24.04",
        "dlami-base-oss-ubuntu-22.04-arm64",
        "dlami-base-oss-ubuntu-24.04-arm64",
        "gcp-ubuntu-accelerator-2404-nvidia-580",
        "dgx-os-7",
        "ubuntu-22.04",
        "ubuntu-24.04",
        "debian-12-local",
        "azure-ubuntu-hpc-2204",
        "azure-ubuntu-hpc-2404",
    }


@pytest.mark.parametrize("key", sorted(MANIFESTS.images))
def test_every_shipped_component_names_a_public_source_read_on_a_date(key):
    image = MANIFESTS.images[key]
    listed = tuple(image.components)
    assert listed[: len(COMPONENTS)] == COMPONENTS, f"{key}: components out of order or missing"
    assert set(listed[len(COMPONENTS) :]) <= set(FABRIC_COMPONENTS), f"{key}: {listed}"
    for name, item in image.components.items():
        if item.shipped is not True:
            continue
        source = MANIFESTS.sources[item.source or ""]
        assert source.url.startswith("https://"), f"{key}.{name}: {source.url}"
        assert source.retrieved >= "2026-11-01", f"{key}.{name}: read {source.retrieved}"


@pytest.mark.parametrize("key", sorted(MANIFESTS.images))
def test_a_manifest_names_an_exact_release(key):
    image = MANIFESTS.images[key]
    assert image.release, key
    # A DLAMI is pinned to a dated release (YYYYMMDD), as its release notes name it, or says it was not read.
    if image.provider == "aws":
        assert (len(image.release) == 8 and image.release.isdigit()) or image.release.startswith(
            "not read"
        ), image.release


@pytest.mark.parametrize("arch", aws_rules.ARCHITECTURES)
def test_every_aws_family_the_catalog_boots_has_a_manifest_for_each_architecture(arch):
    for family in aws_rules.AMI_FAMILIES:
        key = MANIFESTS.for_family(family, arch)
        assert key is not None, (family, arch)
        assert MANIFESTS.images[key].arch in (arch, "any"), (family, arch, key)


@pytest.mark.parametrize(
    ("family", "arch", "key"),
    [
        ("dlami-base-ubuntu-22.04", "x86_64", "dlami-base-oss-ubuntu-22.04"),
        ("dlami-base-ubuntu-24.04", "x86_64", "dlami-base-oss-ubuntu-24.04"),
        ("dlami-base-ubuntu-22.04", "arm64", "dlami-base-oss-ubuntu-22.04-arm64"),
        ("dlami-base-ubuntu-24.04", "arm64", "dlami-base-oss-ubuntu-24.04-arm64"),
        ("ubuntu-24.04", "arm64", "ubuntu-24.04"),
    ],
)
def test_a_dlami_family_boots_the_manifest_of_its_architecture(family, arch, key):
    """p4d/p5/p5en/p6 boot the x86_64 DLAMI, p6e-gb200 the ARM64 one: each gets the facts of its own release
    page (twins-sourcing-2026-11-27 item 1)."""
    assert MANIFESTS.for_family(family, arch) == key


@pytest.mark.parametrize("key", sorted(k for k, v in MANIFESTS.images.items() if v.arch == "x86_64"))
def test_an_x86_64_manifest_takes_nothing_from_an_arm64_page(key):
    image = MANIFESTS.images[key]
    named = {item.source for item in image.components.values()} | {image.persistence_mode.source}
    arm = sorted(s for s in named if s and "arm64" in MANIFESTS.sources[s].url.lower())
    assert arm == [], f"{key} cites ARM64 pages: {arm}"


def test_the_x86_64_dlami_24_04_is_the_release_its_x86_64_page_describes():
    """Item 2 of the sourcing note and N2: the x86_64 24.04 release is 20260915 and ships GDRCopy 2.6."""
    image = MANIFESTS.images["dlami-base-oss-ubuntu-24.04"]
    assert image.release == "20260915"
    gdrcopy = image.components["gdrcopy"]
    assert (gdrcopy.shipped, gdrcopy.version) == (True, "2.6")
    assert "gpubaseoss-ul2404-2026-09-16" in MANIFESTS.sources[gdrcopy.source or ""].url


@pytest.mark.parametrize("key", sorted(k for k in MANIFESTS.images if k.startswith("dlami-")))
def test_no_dlami_asserts_a_fabric_manager_no_source_lists(key):
    """Item 3 of the sourcing note: no DLAMI page lists the fabric manager; unknown, never asserted."""
    assert MANIFESTS.images[key].components["fabric_manager"].shipped is None
    assert component_modes(MANIFESTS.images[key])["fabric_manager"] == "detect"


def test_the_gcp_accelerator_manifest_is_the_image_the_toolkit_and_the_catalog_boot():
    image = MANIFESTS.images["gcp-ubuntu-accelerator-2404-nvidia-580"]
    assert image.release == "v20260522"
    assert "ubuntu-accelerator-2404-amd64-with-nvidia-580" in image.families
    for name in ("cuda", "nccl", "dcgm"):
        source = MANIFESTS.sources[image.components[name].source or ""]
        assert "1047080375afbb44da4b596be314634e7486af4a" in source.url, source.url


def test_gcp_accelerator_image_verifies_the_driver_and_installs_cuda_nccl_dcgm():
    """Google's image carries the driver only (Cluster Toolkit installs CUDA, DCGM and NCCL on top)."""
    key = gcp_manifest_key(
        "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2404-amd64-with-nvidia-580"
    )
    modes = component_modes(manifest(key))
    assert {name: modes[name] for name in ROLES} == {
        "driver": "verify",
        "cuda": "install",
        "nccl": "install",
        "dcgm": "install",
    }
    # Persistence mode is off on the image: the role turns it on (not a verify failure).
    assert modes[PERSISTENCE] == "install"


@pytest.mark.parametrize("key", ["dlami-base-oss-ubuntu-22.04-arm64", "dlami-base-oss-ubuntu-24.04-arm64"])
def test_the_arm64_dlami_verifies_driver_cuda_nccl_dcgm_and_knows_where_nccl_is(key):
    image = MANIFESTS.images[key]
    modes = component_modes(image)
    assert {modes[name] for name in ROLES} == {"verify"}, modes
    assert modes["efa"] == modes["ofi_nccl"] == "verify"
    # NCCL lives in the default CUDA tree's lib/, not on the linker cache.
    paths = component_paths(image)
    assert paths["nccl_lib_dir"] == "/usr/local/cuda-13.2/lib"
    assert paths["nccl_home"] == "/usr/local/cuda-13.2"


def test_dlami_arm64_22_04_verifies_every_component_it_lists():
    image = MANIFESTS.images["dlami-base-oss-ubuntu-22.04-arm64"]
    modes = component_modes(image)
    shipped = [n for n in COMPONENTS if image.ships(n)]
    assert [modes[n] for n in shipped] == ["verify"] * len(shipped)
    assert set(shipped) >= {"driver", "cuda", "nccl", "dcgm", "efa", "ofi_nccl", "gdrcopy"}


@pytest.mark.parametrize("key", ["dlami-base-oss-ubuntu-22.04", "dlami-base-oss-ubuntu-24.04"])
def test_the_x86_64_dlami_verifies_its_driver_and_detects_what_no_x86_64_page_settles(key):
    modes = component_modes(MANIFESTS.images[key])
    assert modes["driver"] == "verify"
    assert {modes[name] for name in ("cuda", "nccl", "dcgm", "container_toolkit")} == {"detect"}, modes
    assert component_paths(MANIFESTS.images[key]) == {}


def test_an_unknown_component_says_why():
    with pytest.raises(ValidationError, match="unknown component says in its note"):
        ShippedComponent.model_validate({"shipped": None})
    with pytest.raises(ValidationError, match="no version or path"):
        ShippedComponent.model_validate({"shipped": None, "note": "n", "version": "1"})


def test_an_architecture_booted_by_two_manifests_is_refused():
    data = MANIFESTS.model_dump()
    data["images"]["dlami-base-oss-ubuntu-22.04-arm64"]["arch"] = "x86_64"
    with pytest.raises(ValidationError, match="booted by two manifests"):
        type(MANIFESTS).model_validate(data)


def test_dgx_os_7_installs_cuda_and_nccl_and_verifies_driver_and_dcgm():
    modes = component_modes(MANIFESTS.images["dgx-os-7"])
    assert (modes["cuda"], modes["nccl"]) == ("install", "install")
    assert (modes["driver"], modes["fabric_manager"], modes["dcgm"]) == ("verify", "verify", "verify")
    # Item 10 of the sourcing note: NVLSM on DGX OS 7 is not settled by what was read: found out on the node.
    assert modes["nvlsm"] == "detect"


@pytest.mark.parametrize("key", ["ubuntu-22.04", "ubuntu-24.04", "debian-12-local", None])
def test_plain_images_and_unknown_ones_install_everything(key):
    modes = component_modes(manifest(key))
    assert set(modes.values()) == {"install"}, modes
    assert component_paths(manifest(key)) == {}


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts", "ubuntu-22.04"),
        ("projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64", "ubuntu-24.04"),
        (
            "projects/ubuntu-os-accelerator-images/global/images/ubuntu-accelerator-2404-amd64-with-nvidia-580-v20260522",
            "gcp-ubuntu-accelerator-2404-nvidia-580",
        ),
        ("projects/my-project/global/images/my-own-image", None),
    ],
)
def test_gcp_image_paths_map_to_their_manifest(path, key):
    assert gcp_manifest_key(path) == key


@pytest.mark.parametrize(
    ("component", "message"),
    [
        ({"shipped": True}, "names its source"),
        ({"shipped": True, "source": "s", "evidence": "inferred"}, "how it was inferred"),
        ({"shipped": False, "version": "1.0"}, "no version or path"),
    ],
)
def test_a_component_without_its_facts_is_refused(component, message):
    with pytest.raises(ValidationError, match=message):
        ShippedComponent.model_validate(component)


def test_a_manifest_leaving_out_a_component_or_a_cuda_path_is_refused():
    base = MANIFESTS.images["dlami-base-oss-ubuntu-22.04-arm64"].model_dump()
    missing = {**base, "components": {k: v for k, v in base["components"].items() if k != "nccl"}}
    with pytest.raises(ValidationError, match="missing \\['nccl'\\]"):
        ImageManifest.model_validate(missing)
    cuda = {**base["components"]["cuda"], "path": None}
    no_path = {**base, "components": {**base["components"], "cuda": cuda}}
    with pytest.raises(ValidationError, match="cuda is shipped: give its path"):
        ImageManifest.model_validate(no_path)
