"""The pypi_wheels role's filters: which pinned wheels a folder lacks, for which architecture."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "pypi_wheels_filters", ROOT / "roles" / "pypi_wheels" / "filter_plugins" / "wheels.py"
)
assert _spec is not None and _spec.loader is not None
wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheels)

# The file names pip download saved for the pins of cuda_toolkit and nccl (2026-11-23).
SAVED = [
    "/c/nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "/c/nvidia_nvvm-13.5.37-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
    "/c/nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "/c/nvidia_nccl_cu13-2.32.3-py3-none-manylinux_2_27_x86_64.whl",
]
PINS = {"nvidia-cuda-nvcc": "13.5.37", "nvidia-nvvm": "13.5.37", "nvidia-cuda-cccl": "13.3.5.0.6"}


def test_patterns_use_the_wheel_file_name_of_each_project() -> None:
    assert wheels.wheel_file_patterns({"nvidia-nccl-cu13": "2.32.3", "Foo.Bar": "1"}) == [
        "nvidia_nccl_cu13-2.32.3-*.whl",
        "foo_bar-1-*.whl",
    ]


def test_nothing_missing_when_every_pin_has_a_file_for_the_architecture() -> None:
    assert wheels.missing_wheels(SAVED, PINS, ["x86_64", "x86_64"]) == []


def test_missing_per_architecture_and_version() -> None:
    pins = {**PINS, "nvidia-cuda-runtime": "13.5.37", "nvidia-nccl-cu13": "2.30.7"}
    assert wheels.missing_wheels(SAVED, pins, ["x86_64"]) == [
        ["x86_64", "nvidia-cuda-runtime==13.5.37"],
        ["x86_64", "nvidia-nccl-cu13==2.30.7"],  # another version's file does not count
    ]
    aarch64 = wheels.missing_wheels(SAVED, PINS, ["aarch64", "x86_64"])
    assert aarch64 == [["aarch64", f"{name}=={version}"] for name, version in PINS.items()]


def test_a_pure_python_wheel_serves_every_architecture() -> None:
    assert wheels.missing_wheels(["/c/tool-1.0-py3-none-any.whl"], {"tool": "1.0"}, ["aarch64"]) == []
