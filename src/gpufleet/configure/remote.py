"""Run shell commands on a cluster node over SSH, with the cluster's own key and known_hosts.

``SshExecutor`` is what the validation suite uses to submit work to Slurm from the login node; it is
cloud-blind: it needs only the inventory (address, user, key, SSH options).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from gpufleet.errors import ValidationRunError
from gpufleet.inventory.model import Host, Inventory


@dataclass
class SshExecutor:
    inventory: Inventory
    host: Host

    @classmethod
    def login(cls, inventory: Inventory) -> SshExecutor:
        return cls(inventory, inventory.login)

    def command(self, remote: str) -> list[str]:
        connection = self.inventory.connection
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15"]
        if connection.private_key_file:
            argv += ["-i", connection.private_key_file]
        if connection.ssh_common_args:
            argv += shlex.split(connection.ssh_common_args)
        argv += [f"{connection.user}@{self.host.address}", remote]
        return argv

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        """Run ``command`` through the remote login shell; returns (exit code, stdout, stderr)."""
        try:
            done = subprocess.run(
                self.command(command),
                # Never the caller's stdin: ssh sets O_NONBLOCK on the stdin it is given, on the open file
                # that gpufleet's caller shares, and a killed ssh never sets it back; ansible-playbook 2.19
                # then refuses to start in that process tree ("Ansible requires blocking IO on stdin").
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ValidationRunError(
                f"'{command[:120]}' on {self.host.name} did not finish within {timeout:.0f} s",
                hint="raise validation.timeout in the spec, or look at squeue on the login node",
            ) from exc
        if done.returncode == 255 and not done.stdout:
            raise ValidationRunError(
                f"cannot reach {self.host.name} ({self.host.address}) over SSH: {done.stderr.strip()[-400:]}",
                hint="check that the cluster is up ('gpufleet status SPEC')",
            )
        return done.returncode, done.stdout, done.stderr
