"""A thin wrapper around the ``podman`` command, with the host settings the local backend needs.

Every call runs with ``CONTAINERS_CONF`` pointing at a containers.conf that gpufleet writes (runc with the
cgroupfs manager, netavark, ulimits the host allows): on hosts with hybrid cgroups crun refuses to run, and
podman's default ulimits exceed what an unprivileged root may set. See docs/local.md.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.errors import EnvironmentProblem, ProvisionError

HOST_PACKAGES = "podman runc debootstrap uidmap netavark aardvark-dns iptables openssh-client"
_NPROC_CEILING = 32768  # higher values were refused on hosts without CAP_SYS_RESOURCE


def containers_conf() -> str:
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = nofile_hard if nofile_hard != resource.RLIM_INFINITY else 1 << 20
    nofile = min(nofile, 1 << 20)
    _, nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)
    nproc = _NPROC_CEILING if nproc_hard == resource.RLIM_INFINITY else min(nproc_hard, _NPROC_CEILING)
    return (
        "# Written by gpufleet for its local backend (docs/local.md).\n"
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        "[network]\n"
        'network_backend = "netavark"\n'
    )


@dataclass
class Podman:
    """Runs podman with gpufleet's containers.conf (written under ``config_dir``)."""

    config_dir: Path

    def __post_init__(self) -> None:
        if shutil.which("podman") is None:
            raise EnvironmentProblem(
                "podman is not installed; the local backend runs the cluster's nodes as podman containers",
                hint=f"apt-get install -y {HOST_PACKAGES}",
            )
        if shutil.which("runc") is None:
            raise EnvironmentProblem("runc is not installed", hint=f"apt-get install -y {HOST_PACKAGES}")
        if os.geteuid() != 0:
            raise EnvironmentProblem(
                "the local backend needs root (rootful podman with fixed IPs on a bridge network)",
                hint="run gpufleet as root, e.g. with sudo",
            )
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.conf_path = self.config_dir / "containers.conf"
        text = containers_conf()
        if not self.conf_path.exists() or self.conf_path.read_text() != text:
            self.conf_path.write_text(text)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "CONTAINERS_CONF": str(self.conf_path)}

    def run(
        self,
        *args: str,
        check: bool = True,
        input_bytes: bytes | None = None,
        timeout: float | None = 600,
        what: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        command = ["podman", *args]
        try:
            if input_bytes is not None:
                done = subprocess.run(
                    command,
                    input=input_bytes,
                    capture_output=True,
                    env=self.env,
                    timeout=timeout,
                    check=False,
                )
                result = subprocess.CompletedProcess(
                    command,
                    done.returncode,
                    done.stdout.decode(errors="replace"),
                    done.stderr.decode(errors="replace"),
                )
            else:
                result = subprocess.run(
                    command,
                    stdin=subprocess.DEVNULL,  # never the caller's (gpufleet.configure.remote says why)
                    capture_output=True,
                    text=True,
                    env=self.env,
                    timeout=timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise ProvisionError(
                f"podman {args[0]} did not finish in {timeout:.0f} s ({what or args[0]})"
            ) from None
        if check and result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-6:])
            raise ProvisionError(
                f"{what or 'podman ' + ' '.join(args[:2])} failed (exit {result.returncode}):\n{tail}"
            )
        return result

    def exists(self, kind: str, name: str) -> bool:
        """``kind`` is container, network, image or volume."""
        sub = {
            "container": ["container", "exists"],
            "network": ["network", "exists"],
            "image": ["image", "exists"],
            "volume": ["volume", "exists"],
        }[kind]
        return self.run(*sub, name, check=False).returncode == 0

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        result = self.run(kind, "inspect", name, what=f"inspect {kind} {name}")
        data = json.loads(result.stdout)
        return data[0] if isinstance(data, list) else data

    def names_with_label(self, kind: str, label: str) -> list[str]:
        """Names of containers, networks or volumes carrying ``label`` (``key=value``)."""
        if kind == "container":
            out = self.run("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout
        elif kind == "network":
            out = self.run("network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}").stdout
        else:
            out = self.run("volume", "ls", "--filter", f"label={label}", "--format", "{{.Name}}").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]
