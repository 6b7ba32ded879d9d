"""The OS release table and the clouds' image families mapped onto it."""

from __future__ import annotations

import typing

import pytest

from gpufleet.catalog import aws as aws_rules
from gpufleet.catalog import gcp as gcp_rules
from gpufleet.catalog.os_releases import OS_RELEASES
from gpufleet.spec.model import AwsAmi


def test_the_releases_gpufleet_boots() -> None:
    assert {key: r.name for key, r in OS_RELEASES.items()} == {
        "debian-12": "Debian 12 (bookworm)",
        "ubuntu-22.04": "Ubuntu 22.04 (jammy)",
        "ubuntu-24.04": "Ubuntu 24.04 (noble)",
    }


@pytest.mark.parametrize("family", typing.get_args(AwsAmi.model_fields["family"].annotation))
def test_an_aws_head_node_runs_the_release_of_the_gpu_family(family: str) -> None:
    gpu = aws_rules.FAMILY_OS_RELEASE[aws_rules.group_family(family, True)]
    head = aws_rules.FAMILY_OS_RELEASE[aws_rules.group_family(family, False)]
    assert gpu == head and gpu in OS_RELEASES


def test_every_gcp_family_names_a_known_release() -> None:
    # (the image manifests' os_release is checked when catalog/images.yaml loads)
    assert set(gcp_rules.IMAGE_OS_RELEASE.values()) <= set(OS_RELEASES)
