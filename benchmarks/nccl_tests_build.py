"""Time the nccl-tests build per GPU architecture list, the way the nccl_tests role builds it.

CUDA and NCCL come from NVIDIA's wheels at the pins in roles/cuda_toolkit and roles/nccl (installed into a
throw-away virtualenv from the wheel folder, as the pypi_wheels role does on a node); the source is the
nccl-tests tarball in tests/vendor. Each architecture list is built from a fresh unpack with
``make -j<jobs> src.build NVCC_GENCODE=...``. MPI=1 is left out (it links one more library and does not
change the compile time, which nvcc dominates). Prints a Markdown table; docs/benchmarks.md records it.

    .venv/bin/python benchmarks/nccl_tests_build.py [--archs sm_90 sm_90,sm_100] [--jobs 2]
        [--wheels ~/.cache/gpufleet/wheels]

The wheel folder must hold the pinned wheels (a local cluster run with provider.gpu_stack fills it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TARBALL = ROOT / "tests" / "vendor" / "nccl-tests-2.19.6.tar.gz"


def pins() -> dict[str, str]:
    cuda = yaml.safe_load((ROOT / "roles" / "cuda_toolkit" / "defaults" / "main.yml").read_text())
    nccl = yaml.safe_load((ROOT / "roles" / "nccl" / "defaults" / "main.yml").read_text())
    return {**cuda["cuda_toolkit_pypi_wheels"], **nccl["nccl_pypi_wheels"]}


def install_wheels(venv: Path, wheels: Path) -> tuple[Path, Path]:
    """The wheels into ``venv``; returns (CUDA_HOME, NCCL_HOME) with the unversioned library links."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    requirements = [f"{name}=={version}" for name, version in pins().items()]
    pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run([*pip, *requirements], check=True)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    major = pins()["nvidia-cuda-nvcc"].split(".")[0]
    cuda, nccl = Path(purelib) / "nvidia" / f"cu{major}", Path(purelib) / "nvidia" / "nccl"
    (cuda / "lib" / "libcudart.so").symlink_to(f"libcudart.so.{major}")
    (nccl / "lib" / "libnccl.so").symlink_to("libnccl.so.2")
    return cuda, nccl


def gencode(archs: list[str]) -> str:
    return " ".join(f"-gencode=arch=compute_{a[3:]},code=sm_{a[3:]}" for a in archs)


def build(archs: list[str], jobs: int, cuda: Path, nccl: Path, workdir: Path) -> tuple[float, int]:
    src = workdir / ("src-" + "-".join(archs))
    with tarfile.open(TARBALL) as archive:
        archive.extractall(src, filter="data")
    tree = next(src.iterdir())
    start = time.monotonic()
    subprocess.run(
        [
            "make", "-C", str(tree), f"-j{jobs}", "src.build", f"BUILDDIR={tree / 'build'}",
            f"CUDA_HOME={cuda}", f"CUDA_LIB={cuda / 'lib'}", f"NCCL_HOME={nccl}",
            f"NVCC_GENCODE={gencode(archs)}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    seconds = time.monotonic() - start
    return seconds, len(list((tree / "build").glob("*_perf")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", nargs="+", default=["sm_90", "sm_90,sm_100"])
    parser.add_argument("--jobs", type=int, default=2)
    cache = Path(os.environ.get("GPUFLEET_CACHE_DIR", Path.home() / ".cache" / "gpufleet"))
    default_wheels = cache / "wheels"
    parser.add_argument("--wheels", type=Path, default=default_wheels)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nccl-tests-bench-") as tmp:
        workdir = Path(tmp)
        cuda, nccl = install_wheels(workdir / "venv", args.wheels)
        rows = []
        for spec in args.archs:
            archs = spec.split(",")
            load = os.getloadavg()[0]
            seconds, binaries = build(archs, args.jobs, cuda, nccl, workdir)
            rows.append((" + ".join(archs), seconds, binaries, load))
    cuda_version = pins()["nvidia-cuda-nvcc"]
    print(f"nccl-tests 2.19.6, CUDA {cuda_version} wheels, make -j{args.jobs}, {os.cpu_count()} CPUs")
    print()
    print("| architectures | build time | binaries | load average at start |")
    print("| --- | ---: | ---: | ---: |")
    for archs, seconds, binaries, load in rows:
        print(f"| {archs} | {seconds:.0f} s | {binaries} | {load:.1f} |")


if __name__ == "__main__":
    main()
