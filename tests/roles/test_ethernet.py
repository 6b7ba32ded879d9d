"""The ethernet role run for real on this machine (connection local): it writes the NCCL environment file
for the socket transport, reads it back as a job does, and checks the interfaces it names are up, from the
network facts the play gathered (site.yml gathers them with the others, so the role runs no setup of its
own there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playbook_json import run_playbook

UP_CHECK = "Assert that every socket interface is up"


def converge(tmp_path: Path, nics: list[str]) -> tuple[int, dict[str, dict]]:
    """Gather min and network facts as site.yml does, then run the role; ``{task name: result}``."""
    play = [
        {
            "name": "Fabric",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all", "min", "network"],
            "roles": [{"role": "ethernet"}],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_fabric": "ethernet",
                    "gpufleet_fabric_host_nics": nics,
                    "gpufleet_nccl_env_file": str(tmp_path / "etc" / "nccl.env"),
                }
            }
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play)
    return rc, results.get("node", {})


@pytest.mark.skipif(not Path("/sys/class/net/lo").exists(), reason="needs the loopback interface")
def test_a_named_interface_that_is_up_passes_and_the_file_is_what_a_job_sources(tmp_path):
    rc, results = converge(tmp_path, ["lo"])
    assert rc == 0, {name: result.get("msg") for name, result in results.items() if result.get("failed")}
    assert results[
        "Read the network facts (the interface with the default route, and every interface's state)"
    ]["skipped"], "the role gathered the network facts again"
    assert not results[UP_CHECK].get("failed")
    written = (tmp_path / "etc" / "nccl.env").read_text().splitlines()
    assert "export NCCL_NET=Socket" in written and "export NCCL_SOCKET_IFNAME=lo" in written, written


def test_an_interface_that_is_not_there_fails_and_names_it(tmp_path):
    rc, results = converge(tmp_path, ["lo", "gpufleet-none0"])
    assert rc != 0
    message = results[UP_CHECK]["msg"]
    assert "NCCL_SOCKET_IFNAME on node is 'lo,gpufleet-none0'" in message, message
    assert "not present or not up: gpufleet-none0" in message and "lo" in message.split("(up:")[1], message
