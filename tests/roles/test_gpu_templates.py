"""The GPU side of the templates, rendered by Ansible itself from an inventory with real GPU counts.

slurm.conf (Gres, GresTypes, the health check settings), gres.conf (one File range per node), cgroup.conf
(ConstrainDevices) from the slurm role, and gpu_health's Slurm health check wrapper, which is then run
against a fake node (fake nvidia-smi, systemctl and scontrol on PATH) to show it drains with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """
- name: Render the GPU templates
  hosts: slurm_controller
  gather_facts: false
  tasks:
    - name: Load the roles' defaults and variables
      ansible.builtin.include_vars:
        file: "{{ item }}"
      loop:
        - ROOT/roles/slurm/defaults/main.yml
        - ROOT/roles/slurm/vars/main.yml
        - ROOT/roles/gpu_health/defaults/main.yml
    - name: Render
      ansible.builtin.template:
        src: "ROOT/roles/{{ item.role }}/templates/{{ item.src }}"
        dest: "OUT/{{ item.dest }}"
        mode: "0755"
      loop:
        - {role: slurm, src: slurm.conf.j2, dest: slurm.conf}
        - {role: slurm, src: gres.conf.j2, dest: gres.conf}
        - {role: slurm, src: cgroup.conf.j2, dest: cgroup.conf}
        - {role: gpu_health, src: slurm-healthcheck.sh.j2, dest: healthcheck}
"""


def _inventory(gpus: int, stack: str) -> dict:
    compute = {
        f"gpu-{i}": {
            "ansible_connection": "local",
            "gpufleet_private_ip": f"10.0.1.{i + 10}",
            "gpufleet_cpus": 192,
            "gpufleet_memory_mb": 1_900_000,
            "gpufleet_gpus": gpus,
            "gpufleet_gpu_stack": stack,
        }
        for i in range(2)
    }
    head = {
        "head": {
            "ansible_connection": "local",
            "gpufleet_private_ip": "10.0.0.5",
            "gpufleet_gpu_stack": "none",
        }
    }
    return {
        "all": {
            "vars": {"gpufleet_cluster": "t", "ansible_python_interpreter": sys.executable},
            "children": {
                "slurm_controller": {"hosts": head},
                "slurm_login": {"hosts": {"head": {}}},
                "compute": {"hosts": compute},
            },
        }
    }


def _render(tmp_path: Path, gpus: int, stack: str, *extra: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(_inventory(gpus, stack)))
    (tmp_path / "play.yml").write_text(PLAYBOOK.replace("ROOT", str(ROOT)).replace("OUT", str(out)))
    playbook = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    done = subprocess.run(
        [playbook, "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_FILTER_PLUGINS": str(ROOT / "roles" / "slurm" / "filter_plugins"),
        },
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def h100_cluster(tmp_path_factory) -> Path:
    return _render(tmp_path_factory.mktemp("h100"), 8, "install", "-e", "slurm_node_registration=static")


def test_slurm_conf_declares_the_real_gpu_count_and_the_health_check(h100_cluster):
    conf = (h100_cluster / "slurm.conf").read_text()
    assert "GresTypes=gpu\n" in conf
    for node, ip in (("gpu-0", "10.0.1.10"), ("gpu-1", "10.0.1.11")):
        assert f"NodeName={node} NodeAddr={ip} CPUs=192 RealMemory=1900000 Gres=gpu:8 State=UNKNOWN" in conf
    assert "HealthCheckProgram=/usr/local/sbin/gpufleet-slurm-healthcheck\n" in conf
    assert "HealthCheckInterval=300\n" in conf and "HealthCheckNodeState=ANY,CYCLE\n" in conf


def test_gres_conf_names_every_gpu_device_and_cgroup_constrains_devices(h100_cluster):
    gres = (h100_cluster / "gres.conf").read_text()
    assert [line for line in gres.splitlines() if line.startswith("NodeName")] == [
        "NodeName=gpu-0 Name=gpu File=/dev/nvidia[0-7]",
        "NodeName=gpu-1 Name=gpu File=/dev/nvidia[0-7]",
    ]
    assert "ConstrainDevices=yes" in (h100_cluster / "cgroup.conf").read_text().splitlines()


def test_no_health_check_where_the_gpu_roles_do_not_run(tmp_path):
    conf = (_render(tmp_path, 1, "none", "-e", "slurm_node_registration=static") / "slurm.conf").read_text()
    assert "Gres=gpu:1" in conf and "HealthCheckProgram" not in conf


def test_the_health_check_wrapper_drains_a_node_with_the_reason(h100_cluster, tmp_path):
    from gpufleet.validate.slurm import node_health_script

    (h100_cluster / "gpufleet-node-check").write_text(node_health_script())
    (h100_cluster / "gpufleet-node-check").chmod(0o755)
    wrapper = (h100_cluster / "healthcheck").read_text()
    assert wrapper.splitlines()[-1] == "exec /usr/local/sbin/gpufleet-node-check --check --drain --skip dcgm"
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "python3").symlink_to(sys.executable)
    scripts = {
        "nvidia-smi": 'case "$1" in '
        '-L) for i in 0 1 2 3 4 5 6; do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; done;; '
        '--query-gpu=index,persistence_mode) for i in 0 1 2 3 4 5 6; do echo "$i, Enabled"; done;; esac',
        "systemctl": "echo active",
        "scontrol": f'echo "$@" > {tmp_path}/drained',
    }
    for name, body in scripts.items():
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    expect = {"gpus": 8, "nvswitch": True, "cpus": 1, "memory_mb": 1, "driver_branch": 580}
    (tmp_path / "node-check.json").write_text(json.dumps(expect))
    # Slurm runs HealthCheckProgram with no arguments; the expectations come from the file the role writes.
    text = wrapper.replace("--check", f"--check --expect {tmp_path}/node-check.json").replace(
        "/usr/local/sbin", str(h100_cluster)
    )
    (tmp_path / "healthcheck").write_text(text)
    done = subprocess.run(
        ["/bin/sh", str(tmp_path / "healthcheck")],
        capture_output=True,
        text=True,
        env={"PATH": str(tools), "SLURMD_NODENAME": "gpu-1"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL gpu-1: 7 GPUs visible, the inventory expects 8" in done.stdout
    reason = "reason=gpufleet-node-check: 7 GPUs visible, the inventory expects 8"
    assert (tmp_path / "drained").read_text().strip() == f"update nodename=gpu-1 state=drain {reason}"
