"""The reaper destroys clusters made by ``pulumi up`` in a Pulumi project folder (``stacks/``): the clouds'
tags name an expired cluster, the one stack whose spec names it is destroyed (a dry run only says so)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli import reap as reap_cli
from gpufleet.cli.app import app
from gpufleet.errors import LeftoversError, ProvisionError
from gpufleet.infra.stack_configs import Stack, project_stacks
from gpufleet.lifecycle import reap as reap_module
from gpufleet.lifecycle.reap import CloudExpired, reap_stacks
from gpufleet.progress import RecordingReporter

ROOT = Path(__file__).resolve().parents[2]
WHEN = "2026-11-22T21:00:00+00:00"


def test_the_shipped_stacks_are_found_by_the_cluster_their_spec_names():
    broken: list = []
    found = project_stacks(ROOT / "stacks", broken)
    assert broken == []
    assert {cluster: [s.name for s in stacks] for cluster, stacks in found.items()} == {
        "llm-p5": ["p5-fsx"],
        "p4d-spot": ["p4d-spot"],
        "p5-block": ["p5-capacity-block"],
        "a3mega": ["a3-mega-lustre"],
        "a3ultra": ["a3-ultra-reservation"],
        "ndh100": ["nd-h100-lustre"],
    }


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of stacks/ beside a copy of examples/, plus a second stack of llm-p5 and a broken config."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "stacks"


def _destroyed(into: list[str]):
    def destroy(stack: Stack) -> list[str]:
        into.append(stack.name)
        return [f"Pulumi stack {stack.name}: 40 resource(s) destroyed, nothing left"]

    return destroy


def test_one_stack_per_expired_cluster_is_destroyed(project):
    called: list[str] = []
    expired = [
        CloudExpired("llm-p5", "aws", "us-east-1", WHEN),
        CloudExpired("llm-p5", "aws", "us-west-2", WHEN),  # the same cluster found twice: one destroy
        CloudExpired("a3mega", "gcp", "my-gpu-project", WHEN),
        CloudExpired("someone-else", "aws", "us-east-1", WHEN),
        CloudExpired("a3ultra", "aws", "us-east-1", WHEN),  # a GCP stack's name seen on AWS: not ours
    ]
    items = reap_stacks(expired, project_stacks(project), _destroyed(called))
    assert called == ["p5-fsx", "a3-mega-lustre"]
    actions = {(item.cluster, item.provider): item.action for item in items}
    assert actions[("llm-p5", "aws us-east-1")] == "destroyed (stack p5-fsx)"
    assert actions[("a3mega", "gcp my-gpu-project")] == "destroyed (stack a3-mega-lustre)"
    assert actions[("someone-else", "aws us-east-1")].startswith("skipped: no stack in the project makes aws")
    assert actions[("a3ultra", "aws us-east-1")].startswith("skipped: no stack")
    assert len(items) == 4


def test_a_dry_run_destroys_nothing(project):
    called: list[str] = []
    items = reap_stacks(
        [CloudExpired("llm-p5", "aws", "us-east-1", WHEN)],
        project_stacks(project),
        _destroyed(called),
        dry_run=True,
    )
    assert called == [] and [item.action for item in items] == ["would destroy (stack p5-fsx)"]


def test_two_stacks_of_one_cluster_and_a_kept_spec_are_left_alone(project):
    shutil.copy(project / "Pulumi.p5-fsx.yaml", project / "Pulumi.p5-fsx-copy.yaml")
    spec = yaml.safe_load((project.parent / "examples" / "aws-p4d-spot.yaml").read_text())
    spec["lifetime"] = {**spec.get("lifetime", {}), "on_expiry": "warn"}
    (project.parent / "examples" / "aws-p4d-spot.yaml").write_text(yaml.safe_dump(spec))
    called: list[str] = []
    expired = [
        CloudExpired("llm-p5", "aws", "us-east-1", WHEN),
        CloudExpired("p4d-spot", "aws", "us-east-1", WHEN),
    ]
    items = reap_stacks(expired, project_stacks(project), _destroyed(called))
    assert called == []
    assert (
        items[0].action
        == "skipped: stacks p5-fsx, p5-fsx-copy all make cluster 'llm-p5'; destroy the right one"
    )
    assert items[1].action == "kept (lifetime.on_expiry: warn; stack p4d-spot)"


def test_a_broken_stack_config_is_reported_not_fatal(project):
    (project / "Pulumi.bad.yaml").write_text("config:\n  gpufleet:spec: ../examples/missing.yaml\n")
    broken: list = []
    found = project_stacks(project, broken)
    assert "llm-p5" in found
    assert len(broken) == 1 and broken[0].startswith(f"stack bad ({project / 'Pulumi.bad.yaml'}): "), broken
    assert "missing.yaml" in broken[0], broken


def test_a_failed_destroy_is_a_failed_item(project):
    def failing(stack: Stack) -> list[str]:
        raise ProvisionError("pulumi destroy of stack 'p5-fsx' failed:\nerror: DependencyViolation")

    items = reap_stacks([CloudExpired("llm-p5", "aws", "us-east-1", WHEN)], project_stacks(project), failing)
    assert items[0].action == "failed: stack p5-fsx: pulumi destroy of stack 'p5-fsx' failed:"


# ---- the command ------------------------------------------------------------------------------------


@pytest.fixture
def expired_on_aws(monkeypatch, tmp_path):
    from datetime import datetime

    from gpufleet.infra.aws import leftovers
    from gpufleet.infra.leftovers import ExpiredCluster

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    when = datetime.fromisoformat(WHEN)
    monkeypatch.setattr(leftovers, "find_expired", lambda region: [ExpiredCluster("llm-p5", when, 31)])


def test_reap_destroy_stacks_destroys_through_the_stack(project, expired_on_aws, monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter: _destroyed(called))
    args = ["reap", "--json", "--aws-region", "us-east-1", "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert called == ["p5-fsx"]
    (item,) = json.loads(result.stdout)["stacks"]
    assert item["action"] == "destroyed (stack p5-fsx)" and item["cluster"] == "llm-p5", item


def test_reap_finds_azure_clusters_by_subscription_and_destroys_their_stack(project, monkeypatch, tmp_path):
    from datetime import datetime

    from gpufleet.infra.azure import leftovers
    from gpufleet.infra.leftovers import ExpiredCluster

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    asked: list[str] = []

    def find_expired(subscription: str) -> list[ExpiredCluster]:
        asked.append(subscription)
        return [ExpiredCluster("ndh100", datetime.fromisoformat(WHEN), 19)]

    monkeypatch.setattr(leftovers, "find_expired", find_expired)
    called: list[str] = []
    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter: _destroyed(called))
    subscription = "00000000-1111-2222-3333-444444444444"
    args = ["reap", "--json", "--azure-subscription", subscription, "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert asked == [subscription] and called == ["nd-h100-lustre"], (asked, called)
    document = json.loads(result.stdout)
    assert document["azure"] == [
        {"subscription": subscription, "cluster": "ndh100", "expires_at": WHEN, "resources": 19}
    ], document
    (item,) = document["stacks"]
    assert (
        item["provider"] == f"azure {subscription}" and item["action"] == "destroyed (stack nd-h100-lustre)"
    )


def test_reap_destroy_stacks_dry_run_only_lists(project, expired_on_aws, monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter: _destroyed(called))
    args = ["reap", "--json", "--dry-run", "--aws-region", "us-east-1", "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert called == []
    assert json.loads(result.stdout)["stacks"][0]["action"] == "would destroy (stack p5-fsx)"


def test_reap_exits_1_when_a_stack_destroy_fails(project, expired_on_aws, monkeypatch):
    def failing(stack: Stack) -> list[str]:
        raise LeftoversError("stack 'p5-fsx' is destroyed but these are still there: ec2 instance i-0abc")

    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter: failing)
    result = CliRunner().invoke(app, ["reap", "--aws-region", "us-east-1", "--destroy-stacks", str(project)])
    assert result.exit_code == 1, result.output
    assert "still there" in result.output


def test_reap_refuses_a_folder_without_a_pulumi_project(tmp_path, expired_on_aws):
    args = ["reap", "--aws-region", "us-east-1", "--destroy-stacks", str(tmp_path)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "no Pulumi project" in result.output


# ---- the destroy itself, at the Automation API's boundary ------------------------------------------------


class FakeStack:
    """What ``auto.select_stack`` returns: ``destroy`` answers an UpdateSummary-shaped result."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.destroyed = False

    def destroy(self, **_kwargs):
        self.destroyed = True
        return SimpleNamespace(summary=SimpleNamespace(resource_changes={"delete": 40}))


@pytest.mark.parametrize("left", [[], ["ec2 instance i-0abc (shutting-down): still listed after 300 s"]])
def test_project_stack_destroy_selects_the_stack_then_checks_leftovers(project, monkeypatch, tmp_path, left):
    from pulumi import automation as auto

    from gpufleet.infra import automation
    from gpufleet.infra.backend import pulumi_backend_of

    selected: list[tuple[str, str]] = []
    stacks: list[FakeStack] = []

    def select_stack(stack_name: str, work_dir: str, opts=None):
        selected.append((stack_name, work_dir))
        stacks.append(FakeStack(stack_name))
        return stacks[-1]

    monkeypatch.setattr(auto, "select_stack", select_stack)
    monkeypatch.setattr(auto, "PulumiCommand", lambda root: SimpleNamespace(root=root))  # it runs `pulumi`
    monkeypatch.setattr(automation, "pulumi_cli", lambda: tmp_path / "bin" / "pulumi")
    aws = type(pulumi_backend_of("aws"))
    monkeypatch.setattr(aws, "check_credentials", lambda self, spec: None)
    monkeypatch.setattr(aws, "leftovers", lambda self, spec, state, reporter: left)
    (stack,) = project_stacks(project)["llm-p5"]
    destroy = reap_module.project_stack_destroy(project, RecordingReporter())
    if left:
        with pytest.raises(LeftoversError, match="still listed after 300 s"):
            destroy(stack)
    else:
        assert destroy(stack) == ["Pulumi stack p5-fsx: 40 resource(s) destroyed, nothing left"]
    assert selected == [("p5-fsx", str(project))] and stacks[0].destroyed
