"""What the local-cluster tests share: podman queries and the ``gpufleet`` command as a user runs it."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.infra.local.cluster import cache_dir
from gpufleet.infra.local.podman import Podman

ROOT = Path(__file__).resolve().parents[2]
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def require_local_backend() -> None:
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("podman", "runc", "debootstrap")):
        pytest.fail(
            "the local cluster tests need root, podman, runc and debootstrap: run scripts/bootstrap.sh test"
        )


@functools.cache
def local_podman() -> Podman:
    """podman as gpufleet runs it: with the containers.conf it writes (netavark, runc, cgroupfs). Without it a
    fresh Debian 12 podman uses CNI, and sees neither the networks gpufleet made nor their absence."""
    return Podman(cache_dir())


def podman(*args: str) -> list[str]:
    """The non-empty lines podman prints; a failure raises, with podman's own message."""
    done = local_podman().run(*args, what=f"podman {' '.join(args)}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def labelled(label: str) -> dict[str, list[str]]:
    """The containers, networks and volumes that carry ``label`` (gpufleet.cluster=<name>)."""
    return {
        "containers": podman("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}"),
        "networks": podman("network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"),
        "volumes": podman("volume", "ls", "--filter", f"label={label}", "--format", "{{.Name}}"),
    }


class Cli:
    def __init__(self, workdir: Path, state: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "GPUFLEET_STATE_DIR": str(state), "COLUMNS": "200", **(env or {})}

    def __call__(
        self, *args: str, expect: int = 0, timeout: float = 1800
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [GPUFLEET, *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == expect, (
            f"gpufleet {' '.join(args)} exited {done.returncode}, expected {expect}\n"
            f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}"
        )
        return done

    def json(self, *args: str, expect: int = 0, timeout: float = 1800) -> dict:
        return json.loads(self(*args, "--json", expect=expect, timeout=timeout).stdout)


# What a package install changes on a Debian node: apt's history, dpkg's database, the package lists.
_PACKAGE_STATE = (
    "md5sum /var/log/apt/history.log /var/lib/dpkg/status; "
    "find /var/lib/apt/lists /var/cache/apt -maxdepth 1 -newer /var/lib/dpkg/status | sort"
)


def package_state(node: str) -> list[str]:
    """Checksums of apt's history and dpkg's status, and package-list files newer than the status."""
    return podman("exec", node, "bash", "-c", _PACKAGE_STATE)


def slurm_on(node: str) -> dict[str, object]:
    """What Slurm ``node`` runs: the versions ``slurmd -V`` and ``sinfo -V`` print (24.11's commands need
    slurm.conf even for -V: ask after configure), the gpufleet-slurm package (roles/slurm's build from
    SchedMD's release) and Debian's own Slurm packages, if any. A command that prints nothing on stdout
    gives its stderr's last line instead, so a failed assertion says why."""

    def ask(command: str) -> str:
        lines = podman("exec", node, "bash", "-c", f"{command} 2>&1 || true")
        return lines[-1] if lines else f"{command}: printed nothing"

    debian = podman(
        "exec",
        node,
        "bash",
        "-c",
        "dpkg-query -W -f '${db:Status-Abbrev}${Package}\\n' slurmd slurmctld slurm-client "
        "slurm-wlm-basic-plugins 2>/dev/null | awk '$1 == \"ii\" {print $2}' || true",
    )
    return {
        "slurmd": ask("slurmd -V"),
        "sinfo": ask("sinfo -V"),
        "package": ask("dpkg-query -W -f '${Package} ${Version}\\n' gpufleet-slurm"),
        "debian": debian,
    }
