"""The roles: lint-clean at the production profile, and every default documented in argument_specs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())


def test_ansible_lint_production_profile() -> None:
    lint = shutil.which("ansible-lint") or str(Path(sys.executable).parent / "ansible-lint")
    done = subprocess.run(
        [lint, "--profile", "production", "--nocolor", "roles", "playbooks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), f"{role.name}: defaults and argument_specs differ"
    for name in defaults:
        assert name.startswith(f"{role.name}_"), f"{role.name}: {name} is not role-prefixed"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_commented(role: Path) -> None:
    lines = (role / "defaults" / "main.yml").read_text().splitlines()
    for index, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            assert index > 0 and lines[index - 1].startswith("#"), f"{role.name}: {line} has no comment above"


def test_internal_variables_are_double_underscored() -> None:
    for role in ROLES:
        vars_dir = role / "vars"
        for path in vars_dir.glob("*.yml") if vars_dir.exists() else []:
            for name in yaml.safe_load(path.read_text()) or {}:
                assert name.startswith(f"__{role.name}_"), f"{path}: {name}"


def test_secrets_never_reach_the_log() -> None:
    key_tasks = yaml.safe_load((ROOT / "roles" / "munge" / "tasks" / "key.yml").read_text())
    flat = []
    for task in key_tasks:
        flat.extend(task.get("block", [task]))
    touching = [
        t
        for t in flat
        if "slurp" in str(t) or "munge_key" in str(t.get("ansible.builtin.copy", "")) or "b64decode" in str(t)
    ]
    assert touching
    for task in touching:
        assert task.get("no_log") is True, task["name"]
