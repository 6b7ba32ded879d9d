"""The first play's OS check (common's preflight): gpufleet's roles are Debian and Ubuntu only, and a Rocky 9
node stops at once with a message that names what is supported. Run for real on this machine with the
platform's facts (``shared_fs/platforms.yml``, as ``setup`` reports them) in place of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import run_playbook, software

PLATFORMS = yaml.safe_load(Path(__file__).with_name("shared_fs").joinpath("platforms.yml").read_text())
CHECK = "Assert that the node runs a supported OS family"


def _preflight(
    tmp_path: Path, platform: str, role: str = "common", host_vars: dict | None = None
) -> tuple[int, dict]:
    facts = {"architecture": "x86_64", **PLATFORMS[platform]}
    play = [
        {
            "name": "Common preflight",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Take on the platform's facts",
                    "ansible.builtin.set_fact": {
                        **{f"ansible_{key}": value for key, value in facts.items()},
                        "cacheable": True,  # so that ansible_facts[...] reads them, as the role does
                    },
                },
                {
                    "name": "Run the preflight",
                    "ansible.builtin.include_role": {"name": role, "tasks_from": "preflight.yml"},
                },
            ],
        }
    ]
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_software": software(),
        **(host_vars or {}),
    }
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"node-1": host}}}, play)
    return rc, results.get("node-1", {})


def test_a_rocky_node_is_refused_with_what_is_supported(tmp_path: Path):
    rc, results = _preflight(tmp_path, "rocky-9")
    assert rc != 0
    message = results[CHECK]["msg"]
    assert message == (
        "gpufleet's roles support Debian and Ubuntu nodes only (Debian 12 bookworm, Ubuntu 22.04 jammy and "
        "24.04 noble; RHEL, Rocky and AlmaLinux are not supported); node-1 runs Rocky 9.6 (RedHat family): "
        "boot a Debian or Ubuntu image."
    ), message


@pytest.mark.parametrize("platform", ["ubuntu-22.04", "ubuntu-24.04", "debian-12"])
def test_debian_and_ubuntu_pass(tmp_path: Path, platform: str):
    rc, results = _preflight(tmp_path, platform)
    assert rc == 0 and not results[CHECK].get("failed"), results[CHECK]


def test_no_role_claims_another_platform():
    roles = Path(__file__).resolve().parents[2] / "roles"
    for meta in sorted(roles.glob("*/meta/main.yml")):
        platforms = {p["name"] for p in yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]}
        assert platforms <= {"Debian", "Ubuntu"}, f"{meta}: {sorted(platforms)}"


GPU_ROLES = ["nvidia_driver", "gpu_health", "cuda_toolkit", "nccl", "nccl_tests", "pypi_wheels"]


def test_gpu_roles_carry_no_other_os_paths():
    """Defect 10: with common refusing other families, RHEL task and vars files in the GPU roles are dead code
    that claims a platform gpufleet does not test; none may come back."""
    roles = Path(__file__).resolve().parents[2] / "roles"
    leftovers = [
        str(path.relative_to(roles))
        for role in GPU_ROLES
        for path in sorted((roles / role).rglob("*"))
        if path.is_file()
        and (
            "RedHat" in path.name
            or any(
                word in path.read_text()
                for word in ("ansible.builtin.dnf", "yum_repository", "dnf_versionlock")
            )
        )
    ]
    assert leftovers == []
    assert "Rocky" not in (roles / "nvidia_driver" / "vars" / "main.yml").read_text()


def test_gpu_health_preflight_refuses_a_rocky_node(tmp_path: Path):
    rc, results = _preflight(tmp_path, "rocky-9", "gpu_health", {"gpufleet_gpus": 8})
    assert rc != 0
    message = results["Assert that the mode and the DCGM pin are valid"]["msg"]
    assert "OS family RedHat (want Debian: Debian 12, Ubuntu 22.04/24.04)" in message, message


def test_nvidia_driver_install_preflight_refuses_a_rocky_node(tmp_path: Path):
    rc, results = _preflight(tmp_path, "rocky-9", "nvidia_driver", {"gpufleet_gpus": 8})
    assert rc != 0
    message = results["Assert that install mode runs on an OS NVIDIA's repository serves"]["msg"]
    assert "installs on Ubuntu 22.04/24.04 and Debian 12 (x86_64, aarch64)" in message, message


@pytest.mark.parametrize("platform", ["ubuntu-22.04", "ubuntu-24.04", "debian-12"])
@pytest.mark.parametrize("role", ["gpu_health", "nvidia_driver"])
def test_gpu_preflights_pass_debian_and_ubuntu(tmp_path: Path, platform: str, role: str):
    rc, results = _preflight(tmp_path, platform, role, {"gpufleet_gpus": 8})
    assert rc == 0, results
