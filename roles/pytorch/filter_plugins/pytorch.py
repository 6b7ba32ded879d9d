"""Filters for the pytorch role: which build of torch a node gets, and what pip is asked for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_CUDA_BUILD = re.compile(r"^cu(\d+)(\d)$")  # PyTorch's names: cu126 is CUDA 12.6, cu130 is CUDA 13.0


def pytorch_build(requested: str, gpus: int | str, cuda: str, builds: Iterable[str]) -> str:
    """The build of torch for a node: ``requested`` unless it is "auto"; auto is "cpu" without GPUs, else
    the newest of ``builds`` with the node's CUDA major and a minor not above the node's (a CUDA 12.6 build
    runs on a CUDA 12.9 node: both need the same major's driver). Raises ValueError naming what is wrong."""
    if requested != "auto":
        if requested != "cpu" and not _CUDA_BUILD.match(requested):
            raise ValueError(f"pytorch_build '{requested}' is none of auto, cpu or cuNNN (e.g. cu126)")
        return requested
    if int(gpus or 0) == 0:
        return "cpu"
    match = re.match(r"^(\d+)\.(\d+)", str(cuda))
    if not match:
        raise ValueError(f"pytorch_cuda '{cuda}' is not a CUDA release such as 12.9")
    major, minor = int(match[1]), int(match[2])
    fitting = []
    for build in builds:
        parsed = _CUDA_BUILD.match(build)
        if parsed and int(parsed[1]) == major and int(parsed[2]) <= minor:
            fitting.append((int(parsed[2]), build))
    if not fitting:
        raise ValueError(
            f"no PyTorch CUDA build in pytorch_cuda_builds {list(builds)} fits CUDA {cuda} (same major, "
            "minor not above): set pytorch_build to one, or pytorch_cuda_builds to the builds of "
            "pytorch_version"
        )
    return max(fitting)[1]


def pytorch_requirements(version: str, build: str, extras: Mapping[str, str]) -> list[str]:
    """pip's requirements: torch with the build as its local version label (2.13.0+cpu), then the extras."""
    return [f"torch=={version}+{build}", *(f"{name}=={pin}" for name, pin in sorted(extras.items()))]


def pytorch_platforms(arch: str) -> list[str]:
    """pip --platform tags for a glibc 2.28+ node: torch is tagged manylinux_2_28, numpy manylinux_2_27/2_28,
    NVIDIA's CUDA wheels manylinux2014 / manylinux_2_17 (pip takes an explicit --platform literally)."""
    return [f"manylinux_2_{minor}_{arch}" for minor in range(28, 16, -1)] + [f"manylinux2014_{arch}"]


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {
            "pytorch_build": pytorch_build,
            "pytorch_requirements": pytorch_requirements,
            "pytorch_platforms": pytorch_platforms,
        }
