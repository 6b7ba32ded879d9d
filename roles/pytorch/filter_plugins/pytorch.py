"""Filters for the pytorch role: which build of torch a node gets, and what pip is asked for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_CUDA_BUILD = re.compile(r"^cu(\d+)(\d)$")  # PyTorch's names: cu126 is CUDA 12.6, cu130 is CUDA 13.0


def _capability(arch: str) -> tuple[int, int] | None:
    """sm_90 -> (9, 0), sm_100a -> (10, 0), compute_120 -> (12, 0); None for anything else."""
    match = re.match(r"^(?:sm|compute)_(\d+)(\d)[a-z]?$", arch)
    return (int(match[1]), int(match[2])) if match else None


def arch_covered(archs: Iterable[str], gpu_arch: str) -> bool:
    """Whether a build with these architectures runs kernels on ``gpu_arch``: machine code (sm_XY) runs on
    a GPU of the same major and the same or a higher minor, PTX (compute_XY) is compiled for any GPU of that
    capability or higher (NVIDIA's CUDA C++ Programming Guide, "Binary Compatibility", "PTX
    Compatibility")."""
    gpu = _capability(gpu_arch)
    if gpu is None:
        return False
    for arch in archs:
        built = _capability(arch)
        if built is None:
            continue
        if arch.startswith("sm_") and built[0] == gpu[0] and built[1] <= gpu[1]:
            return True
        if arch.startswith("compute_") and built <= gpu:
            return True
    return False


def pytorch_build(
    requested: str,
    gpus: int | str,
    cuda: str,
    builds: Iterable[str],
    gpu_arch: str | None = None,
    build_archs: Mapping[str, Iterable[str]] | None = None,
    driver_branch: int | str | None = None,
    driver_minimum: Mapping[str, int] | None = None,
) -> str:
    """The build of torch for a node: ``requested`` unless it is "auto"; auto is "cpu" without GPUs, else a
    build of ``builds`` that has kernels for the node's GPU (``gpu_arch``, against ``build_archs``: a build
    whose architectures are not known is not chosen for a GPU of known arch): the newest with the node's CUDA
    major and a minor not above the node's (a CUDA 12.6 build runs on a CUDA 12.9 node), else, where no build
    of that major has the GPU's kernels (Blackwell under CUDA 12.x: cu126 has none), the oldest build of a
    newer CUDA major that has them and that the node's driver runs (``driver_minimum``: the driver branch a
    CUDA major needs; the wheels bring their own CUDA libraries, only the driver is the node's). Raises
    ValueError naming what is wrong."""
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
    builds = list(builds)
    known = build_archs or {}

    def fits_gpu(build: str) -> bool:
        return not gpu_arch or (build in known and arch_covered(known[build], gpu_arch))

    parsed = [(int(m[1]), int(m[2]), b) for b in builds if (m := _CUDA_BUILD.match(b))]
    same = [(bminor, b) for bmajor, bminor, b in parsed if bmajor == major and bminor <= minor]
    if not same:
        raise ValueError(
            f"no PyTorch CUDA build in pytorch_cuda_builds {builds} fits CUDA {cuda} (same major, "
            "minor not above): set pytorch_build to one, or pytorch_cuda_builds to the builds of "
            "pytorch_version"
        )
    covering = [(bminor, b) for bminor, b in same if fits_gpu(b)]
    if covering:
        return max(covering)[1]
    branch = int(driver_branch or 0)
    newer = sorted(
        (bmajor, bminor, b)
        for bmajor, bminor, b in parsed
        if bmajor > major and fits_gpu(b) and branch >= (driver_minimum or {}).get(str(bmajor), 10**6)
    )
    if newer:
        return newer[0][2]
    raise ValueError(
        f"no PyTorch CUDA build in pytorch_cuda_builds {builds} has kernels for {gpu_arch} "
        f"(pytorch_build_archs {dict(known)}) under CUDA {cuda} or a newer CUDA major the node's driver "
        f"branch {branch or 'unknown'} runs: set pytorch_build, or the spec's software.cuda to a release "
        "whose build has them"
    )


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
            "pytorch_arch_covered": arch_covered,
        }
