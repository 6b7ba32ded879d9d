"""The roles take the versions the spec owns (software.cuda, nccl, nccl_tests, nvidia_driver, efa_installer,
aws_ofi_nccl, slurm) from the inventory's gpufleet_software only: no role default repeats one as a fallback,
and a role run without it refuses at its preflight, naming the variable (issue 30 step 3)."""

from __future__ import annotations

import re
import sys

import pytest
from playbook_json import ROOT, run_playbook

from gpufleet.spec.model import Software

ASSERT = "Assert that the inventory names the versions the role installs or checks"

# role -> (the host variables that make its preflight reach the version check, the variables it must name)
ROLES = {
    "cuda_toolkit": ({}, ["cuda_toolkit_version"]),
    "efa": ({"gpufleet_fabric": "efa"}, ["efa_installer_version", "efa_ofi_nccl_version"]),
    "gpu_health": ({}, ["gpu_health_dcgm_cuda_major", "gpu_health_expect.driver_branch"]),
    "nccl": ({}, ["nccl_version", "nccl_cuda_version"]),
    "nccl_tests": ({}, ["nccl_tests_version"]),
    "nvidia_driver": ({}, ["nvidia_driver_version"]),
    "pytorch": ({"gpufleet_gpus": 8, "gpufleet_software": {"pytorch": "2.9.0"}}, ["pytorch_cuda"]),
    "slurm": ({}, ["slurm_version"]),
}


def test_no_role_default_repeats_a_version_the_spec_owns() -> None:
    owned = {str(value) for value in Software().model_dump().values() if isinstance(value, str)}
    owned -= {"distro", "repo", "pypi"}
    found = []
    for path in sorted(ROOT.glob("roles/*/defaults/main.yml")) + sorted(
        ROOT.glob("roles/*/meta/argument_specs.yml")
    ):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            fallbacks = re.findall(r"default\('([^']*)'\)", line) if "gpufleet_software" in line else []
            literal = re.fullmatch(r"""\s*(?:[a-z_]+_version|default):\s*"?([0-9][0-9.]*)"?\s*""", line)
            for version in [*fallbacks, *([literal[1]] if literal else [])]:
                if version in owned:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {version}")
    assert not found, f"role defaults repeat the spec's versions as fallbacks: {found}"


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    """Each role's preflight on its own local host, with an inventory that has no gpufleet_software."""
    tmp_path = tmp_path_factory.mktemp("versions")
    hosts = {role: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "role_under_test": role, **extra}
             for role, (extra, _) in ROLES.items()}  # fmt: skip
    inventory = {"all": {"hosts": hosts}}
    plays = [  # one play: Ansible ends the playbook once every host of a play has failed
        {"hosts": "all", "gather_facts": False,
         "tasks": [{"ansible.builtin.include_role": {"name": "{{ role_under_test }}",
                                                     "tasks_from": "preflight"}}]}
    ]  # fmt: skip
    code, results = run_playbook(tmp_path, inventory, plays)
    assert code != 0
    return results


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_without_the_inventorys_versions_refuses_naming_them(
    role: str, refused: dict[str, dict[str, dict]]
) -> None:
    result = refused[role][ASSERT]
    assert result.get("failed"), result
    for variable in ROLES[role][1]:
        assert variable in result["msg"], result["msg"]
    assert "gpufleet_software" in result["msg"]
