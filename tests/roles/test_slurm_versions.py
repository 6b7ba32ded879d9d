"""The slurm role's Slurm release check, run for real on this machine (connection local): the controller
reads ``slurmctld -V``, the compute nodes ``slurmd -V``, and the controller refuses a slurmd that is newer
than slurmctld or further behind than slurmctld accepts, before any daemon starts.

The binaries are stand-ins on PATH that print what the real ones print: Debian's and Ubuntu's builds say
``slurm-wlm 22.05.8`` (``slurmctld-wlm -V`` of Debian 12's slurmctld 22.05.8-4+deb12u3, run here; the
packages install ``/usr/sbin/slurmctld-wlm`` and ``slurmd-wlm`` with update-alternatives links named
slurmctld and slurmd), SchedMD's own builds ``slurm 24.11.5`` (``print_slurm_version``: PACKAGE_NAME, then
the version). Versions are the distributions' (gpufleet.catalog.os_releases) and SchedMD's releases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

from gpufleet.catalog.os_releases import OS_RELEASES, SLURM_MAJORS_BEFORE_24_05, slurmd_refused

CHECK = "Assert that no slurmd is newer than slurmctld, nor further behind than slurmctld accepts"
READ = "Read the installed Slurm release (slurmctld -V on the controller, slurmd -V on compute nodes)"
JAMMY = f"slurm-wlm {OS_RELEASES['ubuntu-22.04'].slurm}"  # 21.08.5
BOOKWORM = f"slurm-wlm {OS_RELEASES['debian-12'].slurm}"  # 22.05.8
NOBLE = f"slurm-wlm {OS_RELEASES['ubuntu-24.04'].slurm}"  # 23.11.4


def converge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurmctld: str | None, slurmd: str | None
) -> tuple[int, dict[str, dict[str, dict]]]:
    """The role's version tasks on a head node and two compute nodes, with these ``-V`` outputs (None: the
    binary is not installed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, output in (("slurmctld", slurmctld), ("slurmd", slurmd)):
        if output is not None:
            script = bin_dir / name
            script.write_text(f'#!/bin/sh\n[ "$1" = -V ] || exit 64\necho "{output}"\n')
            script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{'/usr/bin:/bin'}")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": local,
            "children": {
                "slurm_controller": {"hosts": {"head": {}}},
                "slurm_login": {"hosts": {"head": {}, "login": {}}},
                "compute": {"hosts": {"gpu-0": {}, "gpu-1": {}}},
            },
        }
    }
    play = [
        {
            "name": "Slurm",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Versions",
                    "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "versions"},
                },
                {"name": "After the check", "ansible.builtin.debug": {"msg": "daemons would start here"}},
            ],
        }
    ]
    return run_playbook(tmp_path, inventory, play)


def check_messages(results: dict[str, dict[str, dict]]) -> list[str]:
    """The check's failure messages, one per refused compute node (it runs once, on the first host)."""
    ran = [r[CHECK] for r in results.values() if CHECK in r and not r[CHECK].get("skipped")]
    assert len(ran) == 1, results
    return [item["msg"] for item in ran[0].get("results", []) if item.get("failed")]


@pytest.mark.parametrize(
    ("slurmctld", "slurmd", "refused"),
    [
        # today's GCP default before the fix: a jammy head, noble accelerator-image GPU nodes
        (JAMMY, NOBLE, "the slurmd is 3 major release(s) newer"),
        (BOOKWORM, BOOKWORM, None),
        (NOBLE, NOBLE, None),
        # an older slurmd inside the window: 23.11 accepts 23.02 and 22.05
        (NOBLE, BOOKWORM, None),
        # 21.08 is three releases behind 23.11, which accepts two
        (NOBLE, JAMMY, "the slurmd is 3 major releases older"),
        # from 24.11, three: 23.11 (2 behind) and 23.02 (3 behind) pass, 22.05 (4 behind) does not
        ("slurm 24.11.5", NOBLE, None),
        ("slurm 24.11.5", "slurm 23.02.7", None),
        ("slurm 24.11.5", BOOKWORM, "the slurmd is 4 major releases older"),
        # releases after the table's end are counted by the 6-month cycle: 26.05 is 3 after 24.11
        ("slurm 26.05.5", "slurm 24.11.5", None),
        ("slurm 26.05.5", "slurm 24.05.8", "the slurmd is 4 major releases older"),
    ],
)
def test_the_controller_refuses_a_slurmd_it_does_not_accept(
    tmp_path, monkeypatch, slurmctld, slurmd, refused
):
    rc, results = converge(tmp_path, monkeypatch, slurmctld, slurmd)
    assert results["login"][READ].get("skipped"), "a login-only node ran the version command"
    messages = check_messages(results)
    if refused is None:
        assert rc == 0 and messages == [], messages
        assert all("After the check" in results[host] for host in ("head", "gpu-0", "gpu-1"))
        return
    assert rc != 0
    ctld = slurmctld.split()[-1]
    node = slurmd.split()[-1]
    assert len(messages) == 2, messages
    for host, message in zip(("gpu-0", "gpu-1"), messages, strict=True):
        flat = " ".join(message.split())
        assert f"slurmd {node} on {host} cannot register with slurmctld {ctld} on head" in flat, flat
        assert refused in flat, flat
    # any_errors_fatal: no host goes on to start its daemons
    assert not any("After the check" in tasks for tasks in results.values()), results


def test_a_node_without_slurm_is_named(tmp_path, monkeypatch):
    rc, results = converge(tmp_path, monkeypatch, NOBLE, None)
    assert rc != 0
    messages = check_messages(results)
    assert messages and "Could not read the installed Slurm release" in messages[0], messages
    assert "slurmctld -V on head said 'slurm-wlm 23.11.4'" in " ".join(messages[0].split()), messages


def test_the_role_counts_the_releases_as_the_catalog_does():
    role_vars = yaml.safe_load((ROOT / "roles" / "slurm" / "vars" / "main.yml").read_text())
    assert tuple(role_vars["__slurm_majors_before_24_05"]) == SLURM_MAJORS_BEFORE_24_05
    # and the catalog's rule agrees with the table above
    assert slurmd_refused("21.08", "23.11") and not slurmd_refused("23.11", "22.05")
    assert slurmd_refused("23.11", "21.08") and not slurmd_refused("24.11", "23.02")
    assert slurmd_refused("24.11", "22.05") and not slurmd_refused("26.05", "24.11")
