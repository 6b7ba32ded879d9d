"""Run a playbook against a test inventory with Ansible's json callback, as the role tests do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.spec.model import Software

ROOT = Path(__file__).resolve().parents[2]


def software(**pins: Any) -> dict[str, Any]:
    """``gpufleet_software`` as the inventory gpufleet writes it (the spec's software block,
    ``infra.software.with_software``: a default spec's), with ``pins`` over it: the roles take their
    versions from it and have no fallback of their own."""
    return {**Software().model_dump(mode="json"), **pins}


def run_playbook(
    tmp_path: Path, inventory: dict[str, Any], playbook: Path | list[dict[str, Any]], *args: str
) -> tuple[int, dict[str, dict[str, dict]]]:
    """``ansible-playbook`` with the project's roles on ``inventory`` (written to ``tmp_path``) and a playbook
    file or a list of plays; returns the exit code and ``{host: {task name: result}}``, the task names
    without their ``role : `` prefix."""
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    if not isinstance(playbook, Path):
        (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
        playbook = tmp_path / "play.yml"
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_HOST_KEY_CHECKING": "False",
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
         str(playbook), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(
            f"ansible-playbook exited {done.returncode} without a JSON report:\n{done.stderr[-3000:]}"
        )
    results: dict[str, dict[str, dict]] = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                results.setdefault(host, {})[task["task"]["name"].split(" : ", 1)[-1]] = result
    return done.returncode, results
