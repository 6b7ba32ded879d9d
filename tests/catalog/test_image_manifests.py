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
        if not item.shipped:
            continue
        source = MANIFESTS.sources[item.source or ""]
        assert source.url.startswith("https://"), f"{key}.{name}: {source.url}"
        assert source.retrieved >= "2026-11-01", f"{key}.{name}: read {source.retrieved}"


@pytest.mark.parametrize("key", sorted(MANIFESTS.images))
def test_a_manifest_names_an_exact_release(key):
    image = MANIFESTS.images[key]
    assert image.release, key
    # A DLAMI is pinned to a dated release (YYYYMMDD), as its release notes name it.
    if image.provider == "aws":
        assert len(image.release) == 8 and image.release.isdigit(), image.release


def test_every_aws_family_the_catalog_boots_has_a_manifest():
    for family in aws_rules.AMI_FAMILIES:
        assert MANIFESTS.for_family(family) is not None, family


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


@pytest.mark.parametrize("key", ["dlami-base-oss-ubuntu-22.04", "dlami-base-oss-ubuntu-24.04"])
def test_dlami_verifies_driver_cuda_nccl_dcgm_and_knows_where_nccl_is(key):
    image = MANIFESTS.images[key]
    modes = component_modes(image)
    assert {modes[name] for name in ROLES} == {"verify"}, modes
    assert modes["efa"] == modes["ofi_nccl"] == "verify"
    # NCCL lives in the default CUDA tree's lib/, not on the linker cache.
    paths = component_paths(image)
    assert paths["nccl_lib_dir"] == "/usr/local/cuda-13.2/lib"
    assert paths["nccl_home"] == "/usr/local/cuda-13.2"


def test_dlami_22_04_verifies_every_component_it_lists():
    modes = component_modes(MANIFESTS.images["dlami-base-oss-ubuntu-22.04"])
    shipped = [n for n in COMPONENTS if MANIFESTS.images["dlami-base-oss-ubuntu-22.04"].ships(n)]
    assert [modes[n] for n in shipped] == ["verify"] * len(shipped)
    assert set(shipped) >= {"driver", "cuda", "nccl", "dcgm", "efa", "ofi_nccl", "gdrcopy"}


def test_dgx_os_7_installs_cuda_and_nccl_and_verifies_driver_and_dcgm():
    modes = component_modes(MANIFESTS.images["dgx-os-7"])
    assert (modes["cuda"], modes["nccl"]) == ("install", "install")
    assert (modes["driver"], modes["fabric_manager"], modes["dcgm"]) == ("verify", "verify", "verify")


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
    base = MANIFESTS.images["dlami-base-oss-ubuntu-22.04"].model_dump()
    missing = {**base, "components": {k: v for k, v in base["components"].items() if k != "nccl"}}
    with pytest.raises(ValidationError, match="missing \\['nccl'\\]"):
        ImageManifest.model_validate(missing)
    cuda = {**base["components"]["cuda"], "path": None}
    no_path = {**base, "components": {**base["components"], "cuda": cuda}}
    with pytest.raises(ValidationError, match="cuda is shipped: give its path"):
        ImageManifest.model_validate(no_path)
