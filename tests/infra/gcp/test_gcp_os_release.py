"""Every VM of a GCP cluster boots one OS release, so one build of the Slurm roles/slurm builds serves them
all: the head node and CPU groups boot plain Ubuntu of the GPU nodes' release."""

from __future__ import annotations

from pathlib import Path

import pytest
from gcp_testlib import gcp_gpu_types, gcp_spec

from gpufleet.catalog.gcp import IMAGE_OS_RELEASE, PLAIN_UBUNTU, SERIES
from gpufleet.catalog.os_releases import OS_RELEASES
from gpufleet.infra.gcp.compute import base_image
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]


def release(image: str) -> str:
    """The OS release of an image path ``projects/<p>/global/images/family/<family>``."""
    return IMAGE_OS_RELEASE[image.rsplit("/family/", 1)[1]]


@pytest.mark.parametrize("item", gcp_gpu_types(), ids=lambda item: item.name)
def test_the_head_node_boots_the_release_of_the_gpu_nodes(item) -> None:
    spec = gcp_spec(item.name)
    head, gpu = (base_image(spec, group.instance_type) for group in spec.node_groups)
    assert release(head) == release(gpu), f"head boots {head}, {item.name} boots {gpu}"
    assert head.startswith("projects/ubuntu-os-cloud/"), head


PLAIN = "projects/ubuntu-os-cloud/global/images/family/"


@pytest.mark.parametrize(
    ("groups", "head_image"),
    [
        (["a3-megagpu-8g"], PLAIN + "ubuntu-2404-lts-amd64"),
        (["a3-ultragpu-8g"], PLAIN + "ubuntu-2404-lts-amd64"),
        (["a4-highgpu-8g"], PLAIN + "ubuntu-2404-lts-amd64"),
        # A3 High keeps 22.04 for its TCPX kernel, and its head node with it
        (["a3-highgpu-8g"], PLAIN + "ubuntu-2204-lts"),
        # no GPU series with an image of its own: the default release
        (["n2-standard-8"], PLAIN + "ubuntu-2204-lts"),
        # the first group with an image of its own decides (the preflight refuses the mix)
        (["a3-highgpu-8g", "a3-megagpu-8g"], PLAIN + "ubuntu-2204-lts"),
    ],
)
def test_the_head_image(groups: list[str], head_image: str) -> None:
    spec = gcp_spec(
        "a3-megagpu-8g",
        node_groups=[
            {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
            *(
                {"name": f"g{i}", "roles": ["compute"], "instance_type": t, "count": 2}
                for i, t in enumerate(groups)
            ),
        ],
    )
    assert base_image(spec, "n2-standard-8") == head_image


@pytest.mark.parametrize("example", ["gcp-a3-mega.yaml", "gcp-a3-ultra.yaml"])
def test_the_examples_boot_one_release(example: str) -> None:
    spec = load_spec(ROOT / "examples" / example)
    releases = {release(base_image(spec, g.instance_type)) for g in spec.node_groups}
    assert releases == {"ubuntu-24.04"}


def test_every_family_has_a_release_and_every_release_a_plain_family() -> None:
    for series in SERIES:
        assert IMAGE_OS_RELEASE[series.image_family] in OS_RELEASES
    assert set(IMAGE_OS_RELEASE.values()) <= set(PLAIN_UBUNTU)
