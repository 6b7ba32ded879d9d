"""The OS release table (distribution -> Slurm) and the clouds' image families mapped onto it."""

from __future__ import annotations

import typing

import pytest

from gpufleet.catalog import aws as aws_rules
from gpufleet.catalog.os_releases import OS_RELEASES, slurm_release_index, slurmd_refused, slurmd_window
from gpufleet.spec.model import AwsAmi


def test_the_slurm_of_each_release_is_the_upstream_part_of_its_package_version() -> None:
    assert {key: (r.slurm, r.slurm_major) for key, r in OS_RELEASES.items()} == {
        "debian-12": ("22.05.8", "22.05"),
        "ubuntu-22.04": ("21.08.5", "21.08"),
        "ubuntu-24.04": ("23.11.4", "23.11"),
    }


@pytest.mark.parametrize("family", typing.get_args(AwsAmi.model_fields["family"].annotation))
def test_an_aws_head_node_runs_the_release_of_the_gpu_family(family: str) -> None:
    gpu = aws_rules.FAMILY_OS_RELEASE[aws_rules.group_family(family, True)]
    head = aws_rules.FAMILY_OS_RELEASE[aws_rules.group_family(family, False)]
    assert gpu == head and gpu in OS_RELEASES


@pytest.mark.parametrize(
    ("ctld", "slurmd", "refused"),
    [
        ("21.08", "23.11", True),  # newer slurmd: never
        ("23.11", "23.11", False),
        ("23.11", "22.05", False),  # two behind
        ("23.11", "21.08", True),  # three behind, window 2
        ("24.11", "23.02", False),  # three behind, window 3 from 24.11
        ("24.11", "22.05", True),
        ("26.05", "24.11", False),  # after the table: the 6-month cycle
        ("26.05", "24.05", True),
    ],
)
def test_the_compatibility_window(ctld: str, slurmd: str, refused: bool) -> None:
    assert slurmd_refused(ctld, slurmd) is refused


def test_release_order() -> None:
    assert [slurm_release_index(m) for m in ("23.02", "23.11", "24.05", "24.11", "25.05")] == [
        8,
        9,
        10,
        11,
        12,
    ]
    assert (slurmd_window("24.05"), slurmd_window("24.11")) == (2, 3)
