"""dcgm-exporter paired with the node's DCGM (issue 31, N4 and M1): the monitoring role reads the node's DCGM
from its core package, takes the exporter release NVIDIA pairs with it from a sourced table, installs that
exact build (its version read from the node's apt), compares `dcgm-exporter --version` exactly, attaches the
exporter to the node's host engine and adds DCGM's proprietary module on Ampere. Run by Ansible on this
machine (connection local) with stand-ins of dpkg-query, apt-cache and dcgm-exporter first on PATH, shaped by
the vendors' output: dpkg's epoch-carrying DCGM versions ("1:4.4.2-1"), apt-cache show's "Version:" lines, and
dcgm-exporter's "DCGM Exporter version <DCGM>-<exporter>" (NVIDIA/dcgm-exporter @d5e5f510a1b6: Makefile:40,
pkg/cmd/app.go:110-115; urfave/cli's version printer "<name> version <version>")."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from playbook_json import ROOT, run_playbook

ROLE = ROOT / "roles" / "monitoring"


def _stand_ins(tmp_path: Path, dcgm: str | None, exporter_says: str, apt_versions: list[str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "dpkg-query": (
            f'#!/bin/sh\necho -n "{dcgm}"\n'
            if dcgm
            else '#!/bin/sh\necho "dpkg-query: no packages found matching $4" >&2\nexit 1\n'
        ),
        "apt-cache": "#!/bin/sh\n"
        + "".join(
            f'echo "Package: datacenter-gpu-manager-exporter"\necho "Version: {v}"\necho\n'
            for v in apt_versions
        ),
        "dcgm-exporter": f'#!/bin/sh\n[ "$1" = --version ] && echo "DCGM Exporter version {exporter_says}"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, tasks: list[dict[str, Any]], arch: str = "sm_90", **host_vars: object):
    inventory = {
        "all": {
            "children": {"compute": {"hosts": {"node": {}}}, "slurm_controller": {"hosts": {}}},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "gpufleet_provider": "aws",
                "gpufleet_gpus": 8,
                "gpufleet_gpu_arch": arch,
                **host_vars,
            },
        }
    }
    play = [{"name": "monitoring's DCGM pairing", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    return run_playbook(tmp_path, inventory, play)


def _pairing(tmp_path: Path, dcgm: str | None, apt_versions: list[str], **host_vars: object):
    os.environ["PATH"] = f"{_stand_ins(tmp_path, dcgm, '', apt_versions)}:{os.environ['PATH']}"
    tasks = [
        {
            "name": "Pair",
            "ansible.builtin.include_role": {
                "name": "monitoring",
                "tasks_from": "dcgm-pairing.yml",
                "public": True,
            },
        },
        {
            "name": "List",
            "ansible.builtin.command": {"argv": ["apt-cache", "show", "datacenter-gpu-manager-exporter"]},
            "register": "__monitoring_dcgm_exporter_madison",
            "changed_when": False,
        },
        {
            "name": "Show",
            "ansible.builtin.debug": {
                "msg": {
                    "dcgm": "{{ __monitoring_dcgm_paired }}",
                    "release": "{{ __monitoring_dcgm_exporter_release | trim }}",
                    "apt": "{{ __monitoring_dcgm_exporter_apt_version | trim }}",
                    "proprietary": "{{ monitoring_dcgm_proprietary | bool }}",
                }
            },
        },
    ]
    return _run(tmp_path, tasks, **host_vars)


@pytest.fixture(autouse=True)
def _keep_path(monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])


def test_the_exporter_release_follows_the_nodes_dcgm_and_the_apt_version_is_read_on_the_node(tmp_path):
    code, results = _pairing(tmp_path, "1:4.4.2-1", ["1:4.8.2-1", "1:4.7.1-1", "1:4.7.0-1"])
    assert code == 0, results
    assert results["node"]["Show"]["msg"] == {
        "dcgm": "4.4.2",
        # NVIDIA's tag 4.4.2-4.7.1, never the repository's newest (4.8.2 pairs with 4.5.3)
        "release": "4.7.1",
        "apt": "1:4.7.1-1",
        "proprietary": False,
    }


def test_a_dcgm_the_table_lacks_stops_with_the_variable_to_set(tmp_path):
    code, results = _pairing(tmp_path, "1:4.7.0-2", ["4.8.2-1"])
    assert code != 0
    message = results["node"]["Check that a dcgm-exporter release is known for this DCGM"]["msg"]
    assert "DCGM 4.7.0" in message and "monitoring_dcgm_exporter_version" in message, message


def test_ampere_gets_the_proprietary_profiling_module(tmp_path):
    code, results = _pairing(tmp_path, "1:4.4.2-1", ["4.7.1-1"], arch="sm_80")
    assert code == 0, results
    assert results["node"]["Show"]["msg"]["proprietary"] is True
    assert results["node"]["Show"]["msg"]["apt"] == "4.7.1-1"


@pytest.mark.parametrize(
    ("says", "ok"),
    [
        ("4.4.2-4.7.1", True),
        ("4.4.20-4.9.0", False),  # contains "4.4.2": the substring check passed it
        ("4.4.2-4.7.0", False),  # the right DCGM, another exporter build than the one installed
    ],
)
def test_verify_compares_the_whole_reported_version(tmp_path, says, ok):
    os.environ["PATH"] = f"{_stand_ins(tmp_path, '1:4.4.2-1', says, ['4.7.1-1'])}:{os.environ['PATH']}"
    tasks = [
        {
            "name": "Verify",
            "ansible.builtin.include_role": {"name": "monitoring", "tasks_from": "verify.yml"},
        },
    ]
    code, results = _run(tmp_path, tasks)
    assert (code == 0) == ok, results


def test_the_exporter_attaches_to_the_nodes_host_engine(tmp_path):
    tasks = [
        {"name": "Defaults", "ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
        {"name": "Vars", "ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
        {
            "name": "Render",
            "ansible.builtin.template": {
                "src": str(ROLE / "templates" / "gpufleet-dcgm-exporter.service.j2"),
                "dest": str(tmp_path / "unit"),
                "mode": "0644",
            },
        },
    ]
    code, results = _run(tmp_path, tasks)
    assert code == 0, results
    exec_start = next(
        line for line in (tmp_path / "unit").read_text().splitlines() if line.startswith("ExecStart=")
    )
    assert " -r localhost:5555" in exec_start, exec_start
