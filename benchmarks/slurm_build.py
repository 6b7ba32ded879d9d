"""Time the Slurm build and install the way roles/slurm does them, on containers of the local node image.

1. A fresh node container: the role's build packages with apt (``__slurm_build_packages``), then
   ``roles/slurm/files/build-slurm-deb.sh`` on the pinned release tarball with the role's configure options,
   required plugins and replaced packages (what tasks/build.yml passes). The script's build.json gives
   configure, make, install and packaging seconds, and the CPU seconds of everything it ran.
2. Another fresh node container, with munge and Open MPI's PMIx as the munge and mpi roles leave a node:
   the .deb installed with apt (its dependencies from the mirror), as every node of a cluster does.

Prints a Markdown table; docs/benchmarks.md records it ("Slurm from its release"). The tarball is the one
in the control host's cache (a local cluster run fetches it), or give it:

    .venv/bin/python benchmarks/slurm_build.py [--tarball PATH] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

from gpufleet.catalog.slurm import DEFAULT_SLURM, SLURM_RELEASES
from gpufleet.infra.local.cluster import cache_dir
from gpufleet.infra.local.image import ensure_node_image
from gpufleet.infra.local.podman import Podman
from gpufleet.progress import SilentReporter
from gpufleet.spec.model import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "slurm"
NAME = "gpufleet-bench-slurm"


def role_values() -> dict[str, Any]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    os_vars = yaml.safe_load((ROLE / "vars" / "Debian.yml").read_text())
    return {
        "options": defaults["slurm_configure_options"],
        "uid": defaults["slurm_user_id"],
        "plugins": role_vars["__slurm_required_plugins"],
        "packages": os_vars["__slurm_build_packages"],
        "conflicts": os_vars["__slurm_conflicts"],
    }


def timed(podman: Podman, *argv: str) -> float:
    start = time.monotonic()
    podman.run(*argv, what=" ".join(argv[:4]), timeout=3600)
    return time.monotonic() - start


def fresh(podman: Podman, image: str) -> None:
    podman.run("rm", "-f", NAME, check=False, what="removing the benchmark container")
    podman.run(
        "run", "-d", "--name", NAME, image, "sleep", "infinity", what="starting the benchmark container"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    release = SLURM_RELEASES[DEFAULT_SLURM]
    parser.add_argument("--tarball", type=Path, default=cache_dir() / "sources" / f"{release.tag}.tar.gz")
    parser.add_argument("--jobs", default="", help="make -j (default: every core)")
    args = parser.parse_args()
    values = role_values()
    podman = Podman(cache_dir())
    provider = LocalProvider(kind="local")
    image, _ = ensure_node_image(
        podman,
        cache_dir(),
        release=provider.debian_release,
        mirror=provider.mirror,
        reporter=SilentReporter(),
    )
    apt = ["exec", "-e", "DEBIAN_FRONTEND=noninteractive", NAME, "apt-get"]
    try:
        fresh(podman, image)
        timed(podman, *apt, "update", "-q")
        packages = timed(podman, *apt, "install", "-y", "-q", "--no-install-recommends", *values["packages"])
        podman.run("cp", str(args.tarball), f"{NAME}:/root/slurm.tar.gz", what="copying the tarball")
        podman.run(
            "cp", str(ROLE / "files" / "build-slurm-deb.sh"), f"{NAME}:/root/", what="copying the script"
        )
        env = {
            "SLURM_REQUIRED_PLUGINS": " ".join(values["plugins"]),
            "SLURM_CONFLICTS": ", ".join(values["conflicts"]),
            "SLURM_USER_ID": str(values["uid"]),
            "SLURM_JOBS": args.jobs,
        }
        flags = [part for key, value in env.items() for part in ("-e", f"{key}={value}")]
        version = f"{release.version}-1+gfbench"
        build = timed(
            podman, "exec", *flags, NAME, "/root/build-slurm-deb.sh", "/root/slurm.tar.gz", "/root/out",
            "gpufleet-slurm", version, "--", *values["options"],
        )  # fmt: skip
        record = json.loads(podman.run("exec", NAME, "cat", "/root/out/build.json", what="build.json").stdout)
        deb = Path("/tmp") / record["package"]
        podman.run("cp", f"{NAME}:/root/out/{record['package']}", str(deb), what="copying the package out")

        fresh(podman, image)
        timed(podman, *apt, "update", "-q")
        timed(podman, *apt, "install", "-y", "-q", "--no-install-recommends", "munge", "libpmix2")
        podman.run("cp", str(deb), f"{NAME}:/root/", what="copying the package in")
        install = timed(podman, *apt, "install", "-y", "-q", f"/root/{deb.name}")
        said = podman.run("exec", NAME, "slurmd", "-V", what="slurmd -V").stdout.strip()
    finally:
        podman.run("rm", "-f", NAME, check=False, what="removing the benchmark container")
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"Slurm {release.version} ({said}), {record['jobs']} make jobs, load {load} at the end\n")
    print("| step | wall (s) |\n|---|---:|")
    print(f"| build packages (apt, on the builder) | {packages:.1f} |")
    for step in ("configure", "make", "install", "package"):
        print(f"| {step} | {record[step + '_s']} |")
    print(f"| build script in all (CPU {record['cpu_s']:.0f} s) | {build:.1f} |")
    print(f"| install the .deb on a node (apt, with its dependencies) | {install:.1f} |")
    print(f"\npackage: {record['package']}, {record['bytes'] / 1e6:.1f} MB; Depends: {record['depends']}")


if __name__ == "__main__":
    main()
