"""The slurm role's boot-time cleanup of killed steps' PMIx leftovers (tasks/stale-steps.yml), run for real:
the role's task renders its tmpfiles.d file on this machine (connection local), and this machine's own
``systemd-tmpfiles`` (Debian 12's systemd 252) applies it to a slurmd spool folder under ``--root``.

The spool holds what a node killed with a step running keeps (issue 19, seen on the local cluster after
``podman kill``): the PMIx plugin's listening UNIX socket ``stepd.slurm.pmix.<job>.<step>`` and its
library folder ``pmix.<job>.<step>/`` (SchedMD/slurm src/plugins/mpi/pmix/pmixp_info.c), beside slurmd's
own state, which must stay: ``cred_state`` (slurm_cred.c), the batch script folder ``job<id>/`` and
slurmstepd's socket ``<node>_<job>.<step>`` (slurmstepd/req.c).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from playbook_json import run_playbook

TASK = "Remove the PMIx leftovers of steps killed with the node from slurmd's spool at boot (tmpfiles.d)"
SPOOL = "var/lib/slurm/slurmd"  # slurm_default_config's SlurmdSpoolDir, under the fake root
CONF = "gpufleet-slurmd-stale-steps.conf"


def converge(tmp_path: Path) -> tuple[int, dict[str, dict[str, dict]]]:
    """The role's task on a controller and a compute node, writing into ``tmp_path/<host>/tmpfiles.d``."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": local,
            "children": {
                "slurm_controller": {"hosts": {"head": {}}},
                "compute": {"hosts": {"node-0": {}}},
            },
        }
    }
    play = [
        {
            "name": "Slurm",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"__slurm_tmpfiles_dir": f"{tmp_path}/{{{{ inventory_hostname }}}}/tmpfiles.d"},
            "tasks": [
                {
                    "name": "The folder",
                    "ansible.builtin.file": {"path": "{{ __slurm_tmpfiles_dir }}", "state": "directory"},
                },
                {
                    "name": "Stale steps",
                    "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "stale-steps"},
                },
            ],
        }
    ]
    return run_playbook(tmp_path, inventory, play)


def stale_spool(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A slurmd spool as a node killed during job 6's step 0 leaves it. Sockets are bound by a relative name
    from inside the spool (pytest's folders are longer than a UNIX socket's 107-byte path)."""
    spool = root / SPOOL
    (spool / "pmix.6.0").mkdir(parents=True)
    (spool / "pmix.6.0" / "pmix-gds-shmem").write_text("")
    (spool / "job00006").mkdir()
    (spool / "job00006" / "slurm_script").write_text("#!/bin/bash\n")
    (spool / "cred_state").write_bytes(b"\x00\x01")
    monkeypatch.chdir(spool)
    for name in ("stepd.slurm.pmix.6.0", "node-0_6.0"):  # listening sockets whose process died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(name)
        sock.listen(1)
        sock.close()
    return spool


def tmpfiles(conf: Path, root: Path, *flags: str) -> None:
    done = subprocess.run(
        ["systemd-tmpfiles", f"--root={root}", "--remove", *flags, str(conf)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not shutil.which("systemd-tmpfiles"), reason="needs systemd-tmpfiles (Debian: systemd)")
def test_a_boot_removes_only_the_killed_steps_pmix_socket_and_folder(tmp_path, monkeypatch):
    rc, results = converge(tmp_path)
    assert rc == 0, results
    assert results["node-0"][TASK]["changed"] is True
    assert results["head"][TASK].get("skipped"), "the controller runs no slurmd"
    conf = tmp_path / "node-0" / "tmpfiles.d" / CONF
    assert not (tmp_path / "head" / "tmpfiles.d" / CONF).exists()

    root = tmp_path / "root"
    spool = stale_spool(root, monkeypatch)
    # The same socket blocks the requeued step's bind(), as slurmstepd saw it.
    blocked = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with pytest.raises(OSError, match="Address already in use"):
        blocked.bind("stepd.slurm.pmix.6.0")
    blocked.close()

    # On a running node (no --boot: a package upgrade, `systemd-tmpfiles --remove` by hand) nothing goes:
    # a live step keeps its socket.
    tmpfiles(conf, root)
    assert (spool / "stepd.slurm.pmix.6.0").is_socket() and (spool / "pmix.6.0").is_dir()

    # At boot the PMIx socket and folder go; slurmd's state stays.
    tmpfiles(conf, root, "--boot")
    left = sorted(p.relative_to(spool).as_posix() for p in spool.rglob("*"))
    assert left == ["cred_state", "job00006", "job00006/slurm_script", "node-0_6.0"], left
    rebound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rebound.bind("stepd.slurm.pmix.6.0")  # the requeued step can listen again
    rebound.close()

    # The role a second time changes nothing.
    rc, again = converge(tmp_path)
    assert rc == 0 and again["node-0"][TASK]["changed"] is False, again
