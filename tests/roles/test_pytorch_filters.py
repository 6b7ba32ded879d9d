"""roles/pytorch's filters: the build each node gets (pytorch/pytorch RELEASE.md's matrix for 2.13: CUDA 12.6
and 13.0 stable, 13.2 experimental) and what pip is asked for."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from playbook_json import run_playbook, software

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


# PyTorch's build_cuda.sh (pytorch/pytorch@799d09f21574), as the role's defaults carry it (x86_64).
ARCHS = {
    "cu126": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "cu130": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
}


@pytest.mark.parametrize(
    ("cuda", "gpu", "driver", "expected"),
    [
        ("12.9", "sm_90", "580", "cu126"),  # H100 under the default CUDA: the 12.x build has its kernels
        ("12.9", "sm_100", "580", "cu130"),  # B200: cu126 has no sm_100 (issue 31, N8): cu130, which 580 runs
        ("12.9", "sm_103", "580", "cu130"),  # B300: sm_100 machine code runs on 10.3
        ("13.2", "sm_90", "580", "cu130"),  # cu132's kernels are not known: the stable 13.x build
        ("13.0", "sm_80", "595", "cu130"),
    ],
)
def test_the_build_has_kernels_for_the_nodes_gpu(cuda: str, gpu: str, driver: str, expected: str) -> None:
    assert filters.pytorch_build("auto", 8, cuda, BUILDS, gpu, ARCHS, driver, {"13": 580}) == expected


def test_a_blackwell_node_whose_driver_cannot_run_a_newer_build_is_refused() -> None:
    with pytest.raises(ValueError, match="has kernels for sm_100"):
        filters.pytorch_build("auto", 8, "12.9", BUILDS, "sm_100", ARCHS, "570", {"13": 580})


@pytest.mark.parametrize(
    ("archs", "gpu", "covered"),
    [
        (["sm_90"], "sm_100", False),
        (["sm_100"], "sm_103", True),  # same major, higher minor
        (["sm_100"], "sm_120", False),  # machine code never crosses a major
        (["sm_120", "compute_120"], "sm_121", True),
        (["sm_90", "compute_90"], "sm_100", True),  # PTX is compiled for any newer GPU
        (["sm_120", "compute_120"], "sm_100", False),
        ([], "sm_90", False),
    ],
)
def test_arch_coverage(archs: list[str], gpu: str, covered: bool) -> None:
    assert filters.arch_covered(archs, gpu) is covered


@pytest.mark.parametrize(
    ("gpus", "arch", "expected"), [(8, "sm_100", "cu130"), (8, "sm_90", "cu126"), (0, None, "cpu")]
)
def test_the_role_chooses_the_build_from_the_inventorys_gpu(tmp_path, gpus, arch, expected) -> None:
    """The role's own choice (its preflight, the catalog's gpu.arch through the inventory): a p6-b200 or
    a4-highgpu-8g node (sm_100) under the default CUDA 12.9 gets cu130, an H100 node cu126 (issue 31, N8)."""
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_gpus": gpus,
        "gpufleet_software": software(pytorch="2.13.0"),
        **({"gpufleet_gpu_arch": arch} if arch else {}),
    }
    play = [
        {
            "name": "The build",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all", "min"],
            "tasks": [
                {
                    "name": "Choose",
                    "ansible.builtin.include_role": {"name": "pytorch", "tasks_from": "preflight.yml"},
                },
                {"name": "Show", "ansible.builtin.debug": {"msg": "{{ __pytorch_build | trim }}"}},
            ],
        }
    ]
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"node": host}}}, play)
    assert rc == 0, results
    assert results["node"]["Show"]["msg"] == expected
