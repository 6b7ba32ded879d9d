"""infiniband with DOCA-OFED (audit item 9): OFED goes in before the NVIDIA driver (site.yml), and once it is
installed the NVIDIA driver's DKMS modules built for the running kernel are rebuilt against it and OFED's
drivers loaded (openibd restart, or a reboot where allowed), as NVIDIA's DOCA-Host installation guide has it.

The loading steps run for real on this machine (connection local) with a stand-in ``dkms`` whose ``status``
output is DKMS 2's or DKMS 3's, and a stand-in openibd script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

HERE = Path(__file__).with_name("infiniband")
KERNEL = "6.8.0-60-generic"

# `dkms status` on an Ubuntu 24.04 node (DKMS 3) with NVIDIA's open driver built for two kernels, and an
# unrelated module; and the same on Ubuntu 22.04 (DKMS 2.8, comma-separated name and version).
DKMS3 = [
    "nvidia/580.95.05, 6.8.0-57-generic, x86_64: installed",
    f"nvidia/580.95.05, {KERNEL}, x86_64: installed (WARNING! Diff between built and installed module!)",
    f"gdrdrv/2.5.1, {KERNEL}, x86_64: installed",
]
DKMS2 = [
    "nvidia, 580.95.05, 6.8.0-57-generic, x86_64: installed",
    f"nvidia, 580.95.05, {KERNEL}, x86_64: installed",
    f"virtualbox, 7.0.16, {KERNEL}, x86_64: installed",
]


def _run(tmp_path: Path, status: list[str], reboot: bool = False) -> tuple[int, dict, list[str]]:
    node = tmp_path / "node"
    node.mkdir()
    (node / "dkms-status").write_text("\n".join(status) + "\n")
    openibd = node / "openibd"
    openibd.write_text(f'#!/bin/sh\necho "openibd $*" >> "{node}/calls.log"\n')
    openibd.chmod(0o755)
    os.environ["FAKE_NODE"] = str(node)
    play = [
        {
            "name": "Load DOCA-OFED",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Run doca-load.yml",
                    "ansible.builtin.include_role": {"name": "infiniband", "tasks_from": "doca-load.yml"},
                }
            ],
        }
    ]
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_fabric": "infiniband",
        "infiniband_stack": "doca",
        "infiniband_reboot_allowed": reboot,
    }
    # the role's internal values (vars/main.yml) give way only to extra vars
    internal = {"__infiniband_kernel": KERNEL, "__infiniband_openibd": str(openibd)}
    (tmp_path / "extra.json").write_text(json.dumps(internal))
    rc, results = run_playbook(
        tmp_path, {"all": {"hosts": {"dgx": host}}}, play, "-e", f"@{tmp_path / 'extra.json'}"
    )
    log = node / "calls.log"
    return rc, results.get("dgx", {}), log.read_text().splitlines() if log.exists() else []


@pytest.fixture(autouse=True)
def _stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{HERE / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NODE", "")


@pytest.mark.parametrize("status", [DKMS3, DKMS2], ids=["dkms3-noble", "dkms2-jammy"])
def test_after_doca_the_nvidia_dkms_is_rebuilt_and_openibd_restarts(tmp_path: Path, status: list[str]):
    rc, results, calls = _run(tmp_path, status)
    assert rc == 0, {name: r.get("msg") for name, r in results.items() if r.get("failed")}
    assert calls == [
        "dkms status",
        f"dkms install --force -m nvidia -v 580.95.05 -k {KERNEL}",
        "openibd restart",
    ], calls


def test_no_nvidia_dkms_means_only_the_drivers_reload(tmp_path: Path):
    rc, _results, calls = _run(tmp_path, [f"gdrdrv/2.5.1, {KERNEL}, x86_64: installed"])
    assert rc == 0 and calls == ["dkms status", "openibd restart"], calls


def test_doca_ofed_goes_in_before_the_nvidia_driver():
    plays = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())

    def index(predicate) -> int:
        return next((i for i, play in enumerate(plays) if predicate(yaml.safe_dump(play))), -1)

    doca = index(lambda text: "tasks_from: doca.yml" in text and "name: infiniband" in text)
    driver = index(lambda text: "role: nvidia_driver" in text)
    assert -1 < doca < driver, (doca, driver)
    play = plays[doca]
    assert play["hosts"] == plays[driver]["hosts"] == "gpu_stack", play
    task = play["tasks"][0]
    assert "infiniband_stack | default('distro') == 'doca'" in task["when"], task
    assert task["ansible.builtin.include_role"]["apply"]["tags"] == ["install"] == task["tags"], task
    doca_tasks = yaml.safe_load((ROOT / "roles" / "infiniband" / "tasks" / "doca.yml").read_text())
    install = next(t for t in doca_tasks if "ansible.builtin.apt" in t)
    assert install["notify"] == "Load DOCA-OFED's drivers", install
    assert doca_tasks[-1].get("ansible.builtin.meta") == "flush_handlers", doca_tasks[-1]


def test_imex_peers_are_the_compute_nodes_of_the_same_nvlink_domain():
    """GB200/GB300: each node lists the private IPs of the compute nodes that printed its NVLink
    ClusterUUID (one rack), rendered with ansible-core's templating from the role's own expression."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    internal = yaml.safe_load((ROOT / "roles" / "infiniband" / "vars" / "main.yml").read_text())
    racks = {"gb-0": "rack-a", "gb-1": "rack-b", "gb-2": "rack-a", "gb-3": "rack-b", "gb-4": None}
    hostvars = {
        name: {
            "gpufleet_private_ip": f"10.40.0.{4 + index}",
            **({"__infiniband_cluster_uuid": {"stdout": uuid, "rc": 0}} if uuid else {}),
        }
        for index, (name, uuid) in enumerate(racks.items())
    }
    for name, expected in (("gb-0", ["10.40.0.4", "10.40.0.6"]), ("gb-3", ["10.40.0.5", "10.40.0.7"])):
        variables = {
            "groups": {"compute": list(racks)},
            "hostvars": hostvars,
            **hostvars[name],
            "__infiniband_imex_peers": trust_as_template(internal["__infiniband_imex_peers"]),
        }
        templar = Templar(loader=DataLoader(), variables=variables)
        assert templar.template(trust_as_template("{{ __infiniband_imex_peers }}")) == expected, name
