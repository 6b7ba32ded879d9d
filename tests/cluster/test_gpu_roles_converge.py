"""nvidia_driver and gpu_health converged for real on a Debian 12 node, with stand-in NVIDIA packages.

No GPU and no NVIDIA repository are reachable here, so a local apt repository (``file:``) serves packages
built in this test under NVIDIA's names and versions: ``nvidia-driver-pinning-580``, ``nvidia-open``
580.95.05 (a fake ``nvidia-smi`` that reports 8 H100s, and the ``nvidia-persistenced`` unit),
``nvidia-fabricmanager`` 580.95.05 and an older one, DCGM 4.4.2 (a ``dcgmi`` that prints a captured
``dcgmi diag -r 1 -j``). Everything else is real: apt, dpkg holds, systemd units started in the node, the
installed node check. The container has no kernel of its own, so the build prerequisites are left out
and the loaded driver version is read from a file the test writes (``__nvidia_driver_proc_version``);
the initramfs command is ``true`` (no initramfs in a container).

Runs: (1) install: stops and says a reboot is needed; (2) after the "reboot": converges, the fabric
manager at exactly the driver's version, packages held, the node check passes; (3) nothing changes;
(4) verify mode with an inventory that expects 16 GPUs: fails with the gap and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.infra.local.cluster import cache_dir
from gpufleet.infra.local.image import ensure_node_image
from gpufleet.infra.local.podman import Podman
from gpufleet.node import FOLDER as NODE_FOLDER
from gpufleet.progress import SilentReporter
from twins.debs import Deb
from twins.debs import build_repo as shared_build_repo

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("GPUFLEET_GPU_ROLES_NAME", "gpufleet-gpu-roles-test")
DCGM_DIAG = ROOT / "tests" / "validate" / "data" / "gpu" / "dcgmi-diag-r1-j-dcgm3-pass.json"
FAKE_VERSION = "/etc/gpufleet-test/nvidia-version"

NVIDIA_SMI = """#!/bin/sh
case "$1" in
  -L) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;
  --query-gpu=index,persistence_mode) for i in 0 1 2 3 4 5 6 7; do echo "$i, Enabled"; done ;;
  --query-gpu=*) for i in 0 1 2 3 4 5 6 7; do echo "$i, 0, 0"; done ;;
  --query-remapped-rows=*) for i in 0 1 2 3 4 5 6 7; do echo "00000000:1$i:00.0, No"; done ;;
esac
"""


def _unit(name: str, binary: str) -> str:
    return (
        f"[Unit]\nDescription={name} (gpufleet test stand-in)\n[Service]\nExecStart={binary}\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


def build_repo(repo: Path) -> None:
    sleeper = ("#!/bin/sh\nexec sleep infinity\n", 0o755)
    dcgmi = (
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  --version) echo 'Version : 4.4.2' ;;\n"
        f"  diag) cat <<'EOF'\n{DCGM_DIAG.read_text()}\nEOF\n ;;\n"
        "esac\n",
        0o755,
    )
    fabricmanager = {
        "/usr/bin/nv-fabricmanager": sleeper,
        "/lib/systemd/system/nvidia-fabricmanager.service": (
            _unit("nvidia-fabricmanager", "/usr/bin/nv-fabricmanager"), 0o644),
    }  # fmt: skip
    debs = [
        Deb("nvidia-driver-pinning-580", "580.95.05-1", architecture="all"),
        Deb(
            "nvidia-open",
            "580.95.05-1",
            architecture="all",
            files={
                "/usr/bin/nvidia-smi": (NVIDIA_SMI, 0o755),
                "/usr/bin/nvidia-persistenced": sleeper,
                "/lib/systemd/system/nvidia-persistenced.service": (
                    _unit("nvidia-persistenced", "/usr/bin/nvidia-persistenced --no-persistence-mode"),
                    0o644,
                ),
            },
        ),
        # the right one must be picked
        *(
            Deb("nvidia-fabricmanager", version, architecture="all", files=fabricmanager)
            for version in ("580.82.07-1", "580.95.05-1", "580.105.08-1")
        ),
        Deb(
            "datacenter-gpu-manager-4-core", "1:4.4.2-1", architecture="all", files={"/usr/bin/dcgmi": dcgmi}
        ),
        Deb(
            "datacenter-gpu-manager-4-cuda12",
            "1:4.4.2-1",
            architecture="all",
            files={
                "/usr/bin/nv-hostengine": sleeper,
                "/lib/systemd/system/nvidia-dcgm.service": (
                    _unit("nvidia-dcgm", "/usr/bin/nv-hostengine"),
                    0o644,
                ),
            },
            depends="datacenter-gpu-manager-4-core",
        ),
    ]
    shared_build_repo(repo, debs)


PLAYBOOK = """
- name: GPU node stack (test)
  hosts: compute
  become: true
  pre_tasks:
    - name: Use the stand-in NVIDIA repository
      ansible.builtin.copy:
        dest: /etc/apt/sources.list.d/nvidia-test.list
        content: "deb [trusted=yes] file:/repo ./\\n"
        mode: "0644"
    - name: Read the stand-in repository
      ansible.builtin.apt:
        update_cache: true
      changed_when: false
  roles:
    - role: nvidia_driver
    - role: gpu_health
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[tuple[Podman, Path]]:
    if shutil.which("podman") is None or shutil.which("dpkg-scanpackages") is None or os.geteuid() != 0:
        pytest.fail("needs root, podman and dpkg-dev: run scripts/bootstrap.sh test")
    work = tmp_path_factory.mktemp("gpu-roles")
    podman = Podman(work / "podman")
    image, _ = ensure_node_image(
        podman, cache_dir(), release="bookworm", mirror="http://deb.debian.org/debian",
        reporter=SilentReporter(),
    )  # fmt: skip
    repo = work / "repo"
    repo.mkdir()
    build_repo(repo)
    podman.run("rm", "-f", "-t", "0", NAME, check=False)
    podman.run("run", "-d", "--name", NAME, "--hostname", NAME, "--no-hosts", "--systemd=always",
               "-v", f"{repo}:/repo:ro", image)  # fmt: skip
    try:
        for _ in range(60):
            state = podman.run("exec", NAME, "systemctl", "is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            subprocess.run(["sleep", "1"], check=True)
        yield podman, work
    finally:
        podman.run("rm", "-f", "-t", "0", NAME, check=False)


def converge(podman: Podman, work: Path, **host_vars: object) -> subprocess.CompletedProcess[str]:
    variables = {
        "ansible_connection": "containers.podman.podman",
        "ansible_remote_tmp": "/root/.ansible/tmp",
        "gpufleet_gpus": 8,
        "gpufleet_nvswitch": True,
        "gpufleet_gpu_stack": "install",
        "gpufleet_cpus": 1,
        "gpufleet_memory_mb": 1,
        "gpufleet_software": {"nvidia_driver": "580", "cuda": "12.9"},
        # the folder of the files the roles copy to the nodes, as every inventory gpufleet writes names it
        # (inventory/model.py): this play is not in playbooks/, so the roles' fallback beside it is not there
        "gpufleet_node_files": str(NODE_FOLDER),
        # the stand-in node: no NVIDIA URL, no kernel to build for, the "loaded module" in a file
        "nvidia_driver_add_repo": False,
        **host_vars,
    }
    inventory = {"all": {"children": {"compute": {"hosts": {NAME: variables}}}}}
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (work / "play.yml").write_text(PLAYBOOK)
    extra = {
        "__nvidia_driver_build_packages": [],
        "__nvidia_driver_proc_version": FAKE_VERSION,
        "__nvidia_driver_initramfs_command": ["true"],  # no initramfs in a container
    }
    playbook = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    return subprocess.run(
        [playbook, "-i", str(work / "inventory.yml"), str(work / "play.yml"), "-e", json.dumps(extra)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
        env={
            **podman.env,
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        },
    )


def _recap(output: str) -> dict[str, int]:
    line = next(line for line in output.splitlines() if line.startswith(NAME) and "ok=" in line)
    return {key: int(value) for key, value in (part.split("=") for part in line.split(":", 1)[1].split())}


def node_shell(podman: Podman, command: str) -> str:
    return podman.run("exec", NAME, "sh", "-c", command).stdout.strip()


def test_install_stops_for_the_reboot_then_converges_and_holds(node):
    podman, work = node
    first = converge(podman, work)
    assert first.returncode == 2, first.stdout[-3000:]
    assert (
        f"{NAME} needs a reboot: the NVIDIA driver 580.95.05 is installed but the loaded kernel module is "
        "none. "
        "Reboot the node and run configure again, or set nvidia_driver_reboot_allowed: true for it in the "
        "inventory to let the role reboot it." in " ".join(first.stdout.split())
    ), first.stdout[-3000:]

    # "Reboot": the loaded module is now the installed one.
    line = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (test)"
    node_shell(podman, f"mkdir -p /etc/gpufleet-test && echo '{line}' > {FAKE_VERSION}")
    second = converge(podman, work)
    assert second.returncode == 0, second.stdout[-4000:]
    assert "gpufleet-node-check: OK" in second.stdout and "8 GPUs" in second.stdout, second.stdout[-3000:]

    versions = node_shell(
        podman, "dpkg-query -W -f '${Package}=${Version}\\n' 'nvidia-*' 'datacenter-gpu-manager-*'"
    )
    assert sorted(versions.splitlines()) == [
        "datacenter-gpu-manager-4-core=1:4.4.2-1",
        "datacenter-gpu-manager-4-cuda12=1:4.4.2-1",
        "nvidia-driver-pinning-580=580.95.05-1",
        "nvidia-fabricmanager=580.95.05-1",  # exactly the driver's version, not the newest
        "nvidia-open=580.95.05-1",
    ]
    held = node_shell(podman, "dpkg --get-selections | awk '$2 == \"hold\" {print $1}'").split()
    assert sorted(held) == sorted(line.split("=")[0] for line in versions.splitlines())
    states = node_shell(
        podman, "systemctl is-active nvidia-persistenced nvidia-fabricmanager nvidia-dcgm"
    ).split()
    assert states == ["active", "active", "active"]
    assert "--persistence-mode" in node_shell(podman, "systemctl cat nvidia-persistenced")
    assert node_shell(podman, "cat /etc/modprobe.d/blacklist-nouveau.conf").splitlines()[1:] == [
        "blacklist nouveau",
        "options nouveau modeset=0",
    ]
    expect = json.loads(node_shell(podman, "cat /etc/gpufleet/node-check.json"))
    # 8 GPUs on NVSwitch with no Blackwell arch named: no NVLSM is expected (HGX B200/B300 only).
    assert expect == {"gpus": 8, "nvswitch": True, "nvlsm": False, "fabric": "ethernet",
                      "fabric_interfaces": 0, "cpus": 1, "memory_mb": 1, "driver_branch": 580}  # fmt: skip
    # on demand, as an operator runs it (slurmd is not part of this test's node)
    on_demand = podman.run(
        "exec", NAME, "/usr/local/sbin/gpufleet-node-check", "--check", "--skip", "services", check=False
    )
    assert on_demand.stdout.startswith(f"gpufleet-node-check: OK {NAME}: 8 GPUs;"), on_demand.stdout

    third = converge(podman, work)
    assert third.returncode == 0 and _recap(third.stdout)["changed"] == 0, third.stdout[-3000:]


def test_verify_mode_names_the_gap_and_the_fix(node):
    podman, work = node
    done = converge(podman, work, gpufleet_gpu_stack="verify", gpufleet_gpus=16)
    assert done.returncode == 2
    text = " ".join(done.stdout.split())
    assert f"gpufleet-node-check: FAIL {NAME}: 8 GPUs visible, the inventory expects 16" in text, text[-3000:]
    assert "gpufleet never installs over the image's driver" in text
