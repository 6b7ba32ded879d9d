"""The first CUDA toolkit whose compiler targets each GPU architecture, from NVIDIA's release documents.

nccl-tests is compiled on the nodes for the catalog's ``gpu.arch`` (``-gencode=arch=compute_XX,code=sm_XX``):
an older nvcc refuses the target. Only architectures whose first toolkit was read are listed; an
architecture absent here is not judged. Pure data. Creates nothing.
"""

from __future__ import annotations

# "Building Applications Using CUDA Toolkit 12.8" is the first that builds Blackwell (sm_100) cubins;
# 12.7 and earlier reach Blackwell only through PTX (Blackwell Compatibility Guide, section 4).
BLACKWELL_GUIDE = "https://docs.nvidia.com/cuda/blackwell-compatibility-guide/"
# "CUDA Toolkit 12.9 adds compiler target support for SM architecture 10.3 (sm_103, sm_103f, sm_103a)"
# (CUDA Features Archive, CUDA 12.9, General CUDA).
CUDA_12_9_FEATURES = "https://docs.nvidia.com/cuda/archive/12.9.1/cuda-features-archive/index.html"

FIRST_CUDA: dict[str, tuple[tuple[int, int], str]] = {
    "sm_100": ((12, 8), BLACKWELL_GUIDE),
    "sm_103": ((12, 9), CUDA_12_9_FEATURES),
}


def cuda_too_old(arch: str, cuda: str) -> tuple[str, str] | None:
    """(the first CUDA that targets ``arch``, its source) when ``cuda`` predates it; None otherwise or
    when either is unknown (a version such as 'distro', an architecture not listed)."""
    first = FIRST_CUDA.get(arch.rstrip("af"))
    parts = cuda.split(".")
    if first is None or not all(p.isdigit() for p in parts[:2]) or len(parts) < 2:
        return None
    (major, minor), source = first
    if (int(parts[0]), int(parts[1])) < (major, minor):
        return f"{major}.{minor}", source
    return None
