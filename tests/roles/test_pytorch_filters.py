"""roles/pytorch's filters: the build each node gets (pytorch/pytorch RELEASE.md's matrix for 2.13: CUDA 12.6
and 13.0 stable, 13.2 experimental) and what pip is asked for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "pytorch_filters",
    Path(__file__).resolve().parents[2] / "roles" / "pytorch" / "filter_plugins" / "pytorch.py",
)
assert _spec is not None and _spec.loader is not None
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

BUILDS = ["cu126", "cu130", "cu132"]


@pytest.mark.parametrize(
    ("requested", "gpus", "cuda", "expected"),
    [
        ("auto", 0, "12.9", "cpu"),  # the local backend: no GPUs
        ("auto", 8, "12.9", "cu126"),  # the spec's default CUDA: the 12.x build
        ("auto", 8, "12.6", "cu126"),
        ("auto", 8, "13.0", "cu130"),
        ("auto", 8, "13.1", "cu130"),  # no cu131: the newest 13.x not above
        ("auto", 8, "13.2", "cu132"),
        ("cpu", 8, "12.9", "cpu"),  # asked for explicitly
        ("cu130", 0, "12.9", "cu130"),
    ],
)
def test_build(requested: str, gpus: int, cuda: str, expected: str) -> None:
    assert filters.pytorch_build(requested, gpus, cuda, BUILDS) == expected


@pytest.mark.parametrize(
    ("requested", "cuda", "message"),
    [
        ("auto", "12.4", "no PyTorch CUDA build in pytorch_cuda_builds"),  # older than every 12.x build
        ("auto", "11.8", "fits CUDA 11.8"),
        ("rocm", "12.9", "none of auto, cpu or cuNNN"),
        ("auto", "distro", "is not a CUDA release"),
    ],
)
def test_build_refused(requested: str, cuda: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        filters.pytorch_build(requested, 8, cuda, BUILDS)


def test_requirements_and_platforms() -> None:
    assert filters.pytorch_requirements("2.13.0", "cpu", {"numpy": "2.3.5"}) == [
        "torch==2.13.0+cpu",
        "numpy==2.3.5",
    ]
    tags = filters.pytorch_platforms("x86_64")
    # torch 2.13.0+cpu is tagged manylinux_2_28 (the local wheel), NVIDIA's wheels 2014/2_17
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags
    assert tags[-1] == "manylinux2014_x86_64"
