"""Which node builds which Slurm (roles/slurm): one build per key among the play's nodes, none for a key
the control host's cache holds; and the key names the userland the build links against as the node's
package system says it, not /etc/os-release (a twin, Debian 12's userland saying it is Ubuntu, gets
Debian's build)."""

from __future__ import annotations

import importlib.util
import platform
import sys
from pathlib import Path

import pytest
from playbook_json import ROOT, run_playbook


def slurm_filters():
    """The role's filter plugin module (roles/slurm/filter_plugins/slurm.py)."""
    path = ROOT / "roles" / "slurm" / "filter_plugins" / "slurm.py"
    spec = importlib.util.spec_from_file_location("slurm_filters", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slurm_builders():
    return slurm_filters().slurm_builders


@pytest.mark.parametrize(
    ("keys", "cached", "builders"),
    [
        # one key for the cluster: its first node by name builds, the others install its package
        ({"head": "k1", "c-1": "k1", "c-0": "k1"}, [], {"k1": "c-0"}),
        ({"head": "k1", "c-0": "k1"}, ["k1"], {}),
        # two userlands (a 22.04 head beside 24.04 GPU nodes): one build each
        ({"head": "jammy", "gpu-0": "noble", "gpu-1": "noble"}, [], {"jammy": "head", "noble": "gpu-0"}),
        ({"head": "jammy", "gpu-0": "noble"}, ["noble", "other"], {"jammy": "head"}),
    ],
)
def test_one_builder_per_missing_key(keys, cached, builders) -> None:
    assert slurm_builders()(keys, cached) == builders


def test_the_key_names_the_userland_of_this_machine(tmp_path) -> None:
    origins = Path("/etc/dpkg/origins/default")
    if not origins.exists() or "Vendor: Debian" not in origins.read_text() or platform.machine() != "x86_64":
        pytest.skip("the expected key is written for a Debian x86_64 machine (the project's)")
    glibc = platform.libc_ver()[1]
    inventory = {"all": {"hosts": {"here": {"ansible_connection": "local",
                                            "ansible_python_interpreter": sys.executable}}}}  # fmt: skip
    play = [
        {
            "name": "Key",
            "hosts": "all",
            "gather_subset": ["!all", "min"],
            "tasks": [
                {"name": "Read", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "node"}},
                {"name": "Key", "ansible.builtin.debug": {"msg": "{{ __slurm_key }}"}},
            ],
        }
    ]
    rc, results = run_playbook(tmp_path, inventory, play, "-e", "slurm_version=24.11.5")
    assert rc == 0
    key = results["here"]["Key"]["msg"]
    assert key.startswith(f"24.11.5-debian-glibc{glibc}-amd64-"), key
    assert len(key.rsplit("-", 1)[1]) == 12, key  # the recipe's hash
