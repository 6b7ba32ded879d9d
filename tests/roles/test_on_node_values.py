"""The roles' values in a node's own play at boot (gpufleet_configure_on_node, docs/boot-configure.md) and in
a push, under real Ansible: the inventory is the one gpufleet.node.boot_configure writes on a compute node
and on the controller (its compute peers have no address on a cloud), and a pushed inventory of the same
cluster. A push keeps every value it had before."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from playbook_json import ROOT, run_playbook, software

from gpufleet.node import boot_configure

ROLES = ROOT / "roles"
ROLE_NAMES = ("slurm", "munge", "containers", "monitoring")
PRINTED = {
    "client": "{{ __slurm_client_host }}",
    "env": "{{ __slurm_client_env }}",
    "awaited": "{{ __slurm_awaited_hosts }}",
    "timeout": "{{ __slurm_registration_timeout }}",
    "munge_verify": "{{ munge_verify }}",
    "stage": "{{ containers_stage_here }}",
    "verify_targets": "{{ monitoring_verify_targets }}",
    "scraped": "{{ __monitoring_targets.node }}",
}


def facts(host: str, groups: list[str], peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "host_vars": {"gpufleet_cpus": 2, "gpufleet_memory_mb": 1024, "gpufleet_gpus": 0},
        "groups": groups,
        "controller": "c-head",
        "controller_address": None if host == "c-head" else "10.0.0.1",
        "cluster_vars": {
            "gpufleet_cluster": "c",
            "gpufleet_configure_on_node": True,
            "gpufleet_software": software(),
        },
        "peers": peers,
    }


def values(tmp_path: Path, inventory: dict[str, Any], host: str) -> dict[str, Any]:
    play = [{
        "hosts": host,
        "gather_facts": False,
        "vars_files": [str(ROLES / role / folder / "main.yml") for role in ROLE_NAMES
                       for folder in ("defaults", "vars") if (ROLES / role / folder / "main.yml").exists()],
        "tasks": [{"name": "print", "ansible.builtin.set_fact": {"printed": PRINTED}}],
    }]  # fmt: skip
    os.environ["ANSIBLE_FILTER_PLUGINS"] = str(ROLES / "slurm" / "filter_plugins")
    try:
        rc, results = run_playbook(tmp_path, inventory, play, "--limit", host)
    finally:
        del os.environ["ANSIBLE_FILTER_PLUGINS"]
    assert rc == 0, results
    return dict(results[host]["print"]["ansible_facts"]["printed"])


PEERS = [
    {
        "base": "c-gpu",
        "count": 2,
        "groups": ["compute"],
        "host_vars": {"gpufleet_cpus": 2, "gpufleet_memory_mb": 1},
    }
]


def test_a_compute_node_s_own_play_asks_slurmctld_from_itself_and_waits_for_itself(tmp_path: Path) -> None:
    inventory = boot_configure.local_inventory(
        facts("c-gpu-1", ["compute"], PEERS), "c-gpu-1", "10.0.0.3", "python3"
    )
    got = values(tmp_path, inventory, "c-gpu-1")
    assert got["client"] == "c-gpu-1" and got["env"] == {"SLURM_CONF_SERVER": "10.0.0.1:6817"}
    assert got["awaited"] == ["c-gpu-1"] and int(got["timeout"]) == 900
    assert got["munge_verify"] is False and got["stage"] is False


def test_the_controller_s_own_play_sees_its_peers_and_scrapes_only_those_with_an_address(
    tmp_path: Path,
) -> None:
    peers = [dict(PEERS[0], addresses=None)]
    inventory = boot_configure.local_inventory(
        facts("c-head", ["slurm_controller", "slurm_login"], peers), "c-head", "10.0.0.1", "python3"
    )
    got = values(tmp_path, inventory, "c-head")
    assert got["client"] == "c-head" and got["awaited"] == [] and got["stage"] is True
    assert got["verify_targets"] is False and got["scraped"] == ["c-head"]  # cloud peers: no address yet
    local = [dict(PEERS[0], addresses=["10.0.0.2", "10.0.0.3"])]
    inventory = boot_configure.local_inventory(
        facts("c-head", ["slurm_controller", "slurm_login"], local), "c-head", "10.0.0.1", "python3"
    )
    assert values(tmp_path, inventory, "c-head")["scraped"] == ["c-gpu-0", "c-gpu-1", "c-head"]


@pytest.mark.parametrize("host", ["c-head", "c-gpu-0"])
def test_a_push_keeps_the_values_it_had(tmp_path: Path, host: str) -> None:
    node = {"ansible_connection": "local", "gpufleet_cpus": 2, "gpufleet_memory_mb": 1024}
    inventory = {"all": {"vars": {"gpufleet_cluster": "c", "gpufleet_software": software()}, "children": {
        "slurm_controller": {"hosts": {"c-head": {**node, "gpufleet_private_ip": "10.0.0.1"}}},
        "compute": {"hosts": {f"c-gpu-{i}": {**node, "gpufleet_private_ip": f"10.0.0.{i + 2}"}
                              for i in (0, 1)}},
    }}}  # fmt: skip
    got = values(tmp_path, inventory, host)
    assert got["client"] == "c-head" and got["env"] == {} and got["awaited"] == ["c-gpu-0", "c-gpu-1"]
    assert int(got["timeout"]) == 120 and got["munge_verify"] is True and got["stage"] is True
    assert got["verify_targets"] is True and got["scraped"] == ["c-gpu-0", "c-gpu-1", "c-head"]
