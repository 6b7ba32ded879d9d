"""Every way gpufleet destroys a cluster goes through one sequence (``lifecycle.teardown.run``): the export
of the durable copy (or a refusal that destroys nothing), then the destroy, then the leftover proof.

Issue 32 item 1 (GCP audit 2026-11-27 H1, AWS H1; test-honesty M3: the reaper's tests stubbed the destroy
itself). Each path runs through the CLI with the real teardown, stack selection and durable-copy logic,
faked only where they meet the cloud: the exporter's call to FSx (``fsx_export.export_fsx``), the
Automation API's stacks (``select_stack``, ``create_or_select_stack``: a stack that records ``destroy``),
the cloud's leftover listing (``find_leftovers``) and, for the reaper, its expiry listing
(``find_expired``). The spec is the shipped p5 example with an S3 data repository. On main at bc3d77c
``reap --destroy-stacks`` destroyed without the export (its order was destroy, leftovers) and ``down
--stack`` did not exist.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode
from gpufleet.infra.aws import fsx_export
from gpufleet.infra.aws import leftovers as aws_leftovers
from gpufleet.infra.aws.backend import AwsBackend
from gpufleet.infra.durable import refuse
from gpufleet.infra.leftovers import ExpiredCluster
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
STACK = "p5-fsx"
CLUSTER_ID = "0a1b2c3d4e5f"
runner = CliRunner()


@dataclass
class FakeStack:
    """An ``auto.Stack`` as gpufleet uses it: its outputs, config, destroy and workspace."""

    calls: list[str]
    exported: dict[str, Any] = field(default_factory=dict)

    def outputs(self) -> dict[str, auto.OutputValue]:
        return {key: auto.OutputValue(value, False) for key, value in self.exported.items()}

    def set_all_config(self, config: dict[str, auto.ConfigValue]) -> None:
        return None

    def destroy(self, **_: Any) -> Any:
        self.calls.append("destroy")
        self.exported = {}
        summary = type("Summary", (), {"resource_changes": {"delete": 40}})()
        return type("DestroyResult", (), {"summary": summary})()

    @property
    def workspace(self) -> Any:
        return type("Workspace", (), {"remove_stack": lambda _self, name: None})()


@pytest.fixture
def world(tmp_path, monkeypatch) -> dict[str, Any]:
    """A copy of stacks/ and examples/ whose p5 spec links an S3 bucket, a state folder, and the cloud's
    boundaries faked: every call lands in ``calls`` in the order it was made."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    spec_path = tmp_path / "examples" / "aws-p5.yaml"
    raw = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    raw["filesystem"]["data_repository"] = {
        "s3_path": "s3://acme-ml-checkpoints/llm",
        "file_system_path": "/ck",
    }
    spec_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    home = tmp_path / "pulumi-home"  # a `pulumi` that answers `pulumi version`, as the Automation API asks
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "pulumi").write_text('#!/bin/sh\n[ "$1" = version ] && echo v3.200.0\n', encoding="utf-8")
    (home / "bin" / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PULUMI_HOME", str(home))

    calls: list[str] = []
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    outputs = {"cluster": "llm-p5", "cluster_id": CLUSTER_ID, "expires_at": past, "hosts": [{"name": "x"}]}
    stack = FakeStack(calls, dict(outputs))
    monkeypatch.setattr(auto, "select_stack", lambda stack_name, work_dir=None, opts=None: stack)
    monkeypatch.setattr(auto, "create_or_select_stack", lambda **_: stack)

    def export_fsx(cluster, fs, region, wait, reporter, **_):
        calls.append("export")
        if world_state["refuse"]:
            raise refuse(f"the FSx file system of {cluster}", "FAILED", retry="look at the task's report")
        return [f"exported {fs.data_repository.s3_path}"]

    def find_leftovers(self, spec, cluster_id=None):
        calls.append(f"leftovers {cluster_id}")
        return []

    world_state: dict[str, Any] = {"refuse": False}
    monkeypatch.setattr(fsx_export, "export_fsx", export_fsx)
    monkeypatch.setattr(AwsBackend, "find_leftovers", find_leftovers)
    monkeypatch.setattr(
        aws_leftovers,
        "find_expired",
        lambda region: (
            [ExpiredCluster("llm-p5", datetime.now(UTC) - timedelta(hours=1), 30, CLUSTER_ID)]
            if region == "us-east-1"
            else []
        ),
    )
    return {"calls": calls, "spec_path": spec_path, "project": tmp_path / "stacks", "switch": world_state}


def _state(spec_path: Path, *, adopted: Path | None, expired: bool = False) -> ClusterState:
    spec = load_spec(spec_path)
    state = ClusterState.for_name(spec.name)
    state.begin(spec, spec_path)
    state.update(cluster_id=CLUSTER_ID)
    if adopted is not None:
        state.update(adopted={"stack": STACK, "project_dir": str(adopted)})
    if expired:
        state.update(expires_at=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    return state


def down_made_here(world: dict[str, Any]) -> list[str]:
    _state(world["spec_path"], adopted=None)
    return ["down", str(world["spec_path"])]


def down_adopted(world: dict[str, Any]) -> list[str]:
    _state(world["spec_path"], adopted=world["project"])
    return ["down", str(world["spec_path"])]


def down_stack_without_state(world: dict[str, Any]) -> list[str]:
    return ["down", str(world["spec_path"]), "--stack", STACK, "--project-dir", str(world["project"])]


def reap_local(world: dict[str, Any]) -> list[str]:
    _state(world["spec_path"], adopted=None, expired=True)
    return ["reap"]


def reap_destroy_stacks(world: dict[str, Any]) -> list[str]:
    return ["reap", "--aws-region", "us-east-1", "--destroy-stacks", str(world["project"])]


PATHS = [down_made_here, down_adopted, down_stack_without_state, reap_local, reap_destroy_stacks]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.__name__)
def test_every_destroy_exports_then_destroys_then_proves_nothing_is_left(world, path):
    result = runner.invoke(app, [*path(world), "--json"])
    assert result.exit_code == 0, result.output
    assert world["calls"] == ["export", "destroy", f"leftovers {CLUSTER_ID}"], world["calls"]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.__name__)
def test_a_refused_export_destroys_nothing_on_every_path(world, path):
    world["switch"]["refuse"] = True
    result = runner.invoke(app, [*path(world), "--json"])
    assert world["calls"] == ["export"], world["calls"]
    if path.__name__.startswith("reap"):
        assert result.exit_code == ExitCode.FAILED, result.output
        (failed,) = [
            item
            for items in json.loads(result.stdout).values()
            if isinstance(items, list)
            for item in items
            if isinstance(item, dict) and item.get("action", "").startswith("failed")
        ]
        assert "did not reach its durable copy" in failed["action"], failed
    else:
        assert result.exit_code == ExitCode.PROVISION, result.output
        assert "did not reach its durable copy" in result.output, result.output
