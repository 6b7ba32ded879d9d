"""A baked node's configure (``--skip-tags install``) reaches nvidia_driver's reboot decision, which is tagged
always, without the install step that registers ``__nvidia_driver_install`` having run: the decision must
read "no reboot" there, not stop on an undefined variable (every baked GPU node's configure stopped so).
The role's reboot.yml runs for real on localhost in check mode, through include_role as its main does."""

from __future__ import annotations

from pathlib import Path

from playbook_json import run_playbook

DECIDE = "Decide whether the new module needs a reboot"


def test_a_baked_configure_decides_no_reboot_without_the_install_step(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "The reboot step as a baked configure reaches it",
                    "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "reboot"},
                    "vars": {
                        "nvidia_driver_mode": "install",
                        "nvidia_driver_reboot_allowed": False,
                        "__nvidia_driver_proc_version": str(proc),
                    },
                }
            ],
        }
    ]
    _rc, results = run_playbook(tmp_path, inventory, play, "--check")
    decided = results["localhost"][DECIDE]
    assert not decided.get("failed"), decided.get("msg")
    assert decided["ansible_facts"]["__nvidia_driver_needs_reboot"] is False, decided
