"""NVLSM on fourth-generation NVSwitch (HGX/DGX B200/B300: NVSwitch, 8 GPUs, sm_100/sm_103) is required by
every check, not only gpufleet validate: gpu_health writes ``nvlsm`` into the node check's expectations (so
Slurm's periodic HealthCheckProgram drains a node whose nvlsm died) and nvidia_driver's verify step passes
``--nvlsm`` to the node check. H100 (sm_90) and GB200 NVL72 compute trays (4 GPUs; the switches sit in
other trays) run no NVLSM. Both run for real on this machine (connection local)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from playbook_json import ROOT, run_playbook, software

ROLES = ROOT / "roles"

# (gpufleet_nvswitch, gpufleet_gpus, gpufleet_gpu_arch) -> NVLSM expected. The catalog's gpu.arch values.
NODES = {
    "hgx-b200": (True, 8, "sm_100", True),
    "hgx-b300": (True, 8, "sm_103", True),
    "hgx-h100": (True, 8, "sm_90", False),
    "gb200-nvl72-tray": (True, 4, "sm_100", False),
    "b200-without-nvswitch": (False, 8, "sm_100", False),
}


def _host(node: str, **extra: object) -> dict:
    nvswitch, gpus, arch, _ = NODES[node]
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_nvswitch": nvswitch,
        "gpufleet_gpus": gpus,
        "gpufleet_gpu_arch": arch,
        "gpufleet_software": software(),
        **extra,
    }


@pytest.mark.parametrize("node", sorted(NODES))
def test_gpu_health_expectations_require_nvlsm_on_fourth_generation_nvswitch(tmp_path: Path, node: str):
    play = [
        {
            "name": "GPU health expectations",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Take on a Debian node's facts",
                    "ansible.builtin.set_fact": {"ansible_os_family": "Debian", "cacheable": True},
                },
                {
                    "name": "Load the role's variables",
                    "ansible.builtin.include_role": {
                        "name": "gpu_health",
                        "tasks_from": "preflight.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Render the node check's expectations",
                    "ansible.builtin.debug": {"msg": "{{ __gpu_health_expect | to_json }}"},
                },
            ],
        }
    ]
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"n": _host(node)}}}, play)
    task = results["n"]["Render the node check's expectations"]
    assert rc == 0, results["n"]
    expect = json.loads(task["msg"])
    assert expect["nvlsm"] is NODES[node][3], expect
    assert expect["nvswitch"] is NODES[node][0] and expect["gpus"] == NODES[node][1], expect


@pytest.mark.parametrize("node", sorted(NODES))
def test_nvidia_driver_verify_passes_nvlsm_to_the_node_check(tmp_path: Path, node: str):
    """A stand-in for node_health.py records the arguments the verify step hands it."""
    check = tmp_path / "node_health.py"
    check.write_text("import sys\nprint(' '.join(sys.argv[1:]))\n")
    play = [
        {
            "name": "Driver verify",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Verify",
                    "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "verify.yml"},
                }
            ],
        }
    ]
    host = _host(node, nvidia_driver_mode="verify", nvidia_driver_check_script=str(check))
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"n": host}}}, play)
    assert rc == 0, results["n"]
    argv = results["n"]["Check the driver, the GPUs, persistence mode and the fabric manager"][
        "stdout"
    ].split()
    assert ("--nvlsm" in argv) is NODES[node][3], argv
    assert ("--nvswitch" in argv) is NODES[node][0], argv


@pytest.mark.parametrize(("packages", "required"), [("", False), ("nvlink5-580 installed", True)])
def test_verify_mode_finds_out_on_the_node_whether_the_image_runs_nvlsm(tmp_path: Path, packages, required):
    """Google's A4 (and DGX OS 7 on B200/B300): no source says whether the image runs NVLSM (issue 31, M2).
    In verify mode the role asks dpkg: no NVLSM package, nothing is installed over the image's driver and the
    process is not required, by the driver's verify step nor by gpu_health's expectations; a package,
    required."""
    stand_in = tmp_path / "bin" / "dpkg-query"
    stand_in.parent.mkdir()
    stand_in.write_text(f"#!/bin/sh\nprintf '%s\\n' '{packages}' | grep . ; exit 1\n")
    stand_in.chmod(0o755)
    check = tmp_path / "node_health.py"
    check.write_text("import sys\nprint(' '.join(sys.argv[1:]))\n")
    play = [
        {
            "name": "Driver verify, then gpu_health's expectations",
            "hosts": "all",
            "gather_facts": False,
            "environment": {"PATH": f"{stand_in.parent}:/usr/bin:/bin"},
            "tasks": [
                {
                    "name": "Detect",
                    "ansible.builtin.include_role": {
                        "name": "nvidia_driver",
                        "tasks_from": "nvlsm-detect.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Verify",
                    "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "verify.yml"},
                },
                {
                    "name": "gpu_health",
                    "ansible.builtin.include_vars": str(ROLES / "gpu_health" / "defaults" / "main.yml"),
                },
                {"name": "Expect", "ansible.builtin.debug": {"msg": "{{ gpu_health_expect.nvlsm | bool }}"}},
            ],
        }
    ]
    host = _host(
        "hgx-b200",
        nvidia_driver_mode="verify",
        nvidia_driver_check_script=str(check),
        gpufleet_gpu_components={"driver": "verify", "nvlsm": "detect"},
    )
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"n": host}}}, play)
    assert rc == 0, results["n"]
    argv = results["n"]["Check the driver, the GPUs, persistence mode and the fabric manager"][
        "stdout"
    ].split()
    assert ("--nvlsm" in argv) is required, argv
    assert results["n"]["Expect"]["msg"] is required
