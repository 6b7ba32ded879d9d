"""The reaper destroys clusters made by ``pulumi up`` in a Pulumi project folder (``stacks/``): the clouds'
tags name an expired cluster, the one stack whose spec names it is destroyed (a dry run only says so)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli import reap as reap_cli
from gpufleet.cli.app import app
from gpufleet.errors import LeftoversError, ProvisionError
from gpufleet.infra.adopted import StackRecord
from gpufleet.infra.stack_configs import Stack, project_stacks
from gpufleet.lifecycle.reap import CloudExpired, reap_stacks

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
    def destroy(stack: Stack, held: StackRecord) -> list[str]:
        into.append(stack.name)
        return [f"Pulumi stack {stack.name}: 40 resource(s) destroyed, nothing left"]

    return destroy


PAST = datetime.fromisoformat(WHEN)


def _holding(expires: datetime = PAST, cluster_id: str | None = None):
    """What every stack holds now (its outputs): its spec's cluster, past its expiry by default."""
    return lambda stack: StackRecord(stack.spec.name, cluster_id, expires)


def test_one_stack_per_expired_cluster_is_destroyed(project):
    called: list[str] = []
    expired = [
        CloudExpired("llm-p5", "aws", "us-east-1", WHEN),
        CloudExpired("llm-p5", "aws", "us-west-2", WHEN),  # the same cluster found twice: one destroy
        CloudExpired("a3mega", "gcp", "my-gpu-project", WHEN),
        CloudExpired("someone-else", "aws", "us-east-1", WHEN),
        CloudExpired("a3ultra", "aws", "us-east-1", WHEN),  # a GCP stack's name seen on AWS: not ours
    ]
    items = reap_stacks(expired, project_stacks(project), _destroyed(called), record=_holding())
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
        record=_holding(),
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
    items = reap_stacks(expired, project_stacks(project), _destroyed(called), record=_holding())
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
    def failing(stack: Stack, held: StackRecord) -> list[str]:
        raise ProvisionError("pulumi destroy of stack 'p5-fsx' failed:\nerror: DependencyViolation")

    expired = [CloudExpired("llm-p5", "aws", "us-east-1", WHEN)]
    items = reap_stacks(expired, project_stacks(project), failing, record=_holding())
    assert items[0].action == "failed: stack p5-fsx: pulumi destroy of stack 'p5-fsx' failed:"


def test_the_stacks_own_record_decides_not_the_tags(project):
    """The tags only find a candidate; the stack's outputs (rewritten by every pulumi up) decide: a cluster
    whose stack says it expires later is kept (a raised ttl: AWS audit 2026-11-27 H1), tags of another id
    are an earlier cluster's (M5), and a stack that holds nothing is not destroyed for stray tags."""
    called: list[str] = []
    stacks = project_stacks(project)
    now = PAST + timedelta(hours=1)
    expired = [CloudExpired("llm-p5", "aws", "us-east-1", WHEN, "aaaaaaaaaaaa")]

    later = reap_stacks(
        expired, stacks, _destroyed(called), record=_holding(now + timedelta(hours=20)), now=now
    )
    assert later[0].action.startswith("kept: stack p5-fsx says the cluster expires at"), later[0].action
    other = reap_stacks(expired, stacks, _destroyed(called), record=_holding(PAST, "bbbbbbbbbbbb"), now=now)
    assert other[0].action.startswith(
        "skipped: the expired resources carry cluster id aaaaaaaaaaaa, stack "
        "p5-fsx holds cluster id bbbbbbbbbbbb"
    ), other[0].action
    empty = reap_stacks(expired, stacks, _destroyed(called), record=lambda stack: None, now=now)
    assert empty[0].action.startswith("skipped: stack p5-fsx holds no cluster now"), empty[0].action
    assert called == []
    same = reap_stacks(expired, stacks, _destroyed(called), record=_holding(PAST, "aaaaaaaaaaaa"), now=now)
    assert same[0].action == "destroyed (stack p5-fsx)" and called == ["p5-fsx"], same[0].action


# ---- the command ------------------------------------------------------------------------------------


@pytest.fixture
def expired_on_aws(monkeypatch, tmp_path) -> list[str]:
    """llm-p5 is expired in us-east-1; every region the reaper sweeps is noted. The stacks hold their
    spec's cluster, past its expiry."""
    from gpufleet.infra.aws import leftovers
    from gpufleet.infra.leftovers import ExpiredCluster

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    swept: list[str] = []

    def find_expired(region: str) -> list[ExpiredCluster]:
        swept.append(region)
        return [ExpiredCluster("llm-p5", PAST, 31)] if region == "us-east-1" else []

    monkeypatch.setattr(leftovers, "find_expired", find_expired)
    monkeypatch.setattr(reap_cli, "project_record", lambda folder: _holding())
    return swept


def test_reap_destroy_stacks_sweeps_every_region_a_stack_lives_in(project, expired_on_aws, monkeypatch):
    """AWS audit 2026-11-27 H2: the shipped reaper passed one region, so the Capacity Block stack in
    us-east-2 was never reaped. Failed on main at bc3d77c (only us-east-1 swept)."""
    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter, durable: _destroyed([]))
    args = ["reap", "--json", "--dry-run", "--aws-region", "us-east-1", "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    regions = {
        stack.spec.provider.region
        for s in project_stacks(project).values()
        for stack in s
        if stack.spec.provider.kind == "aws"
    }
    assert regions == {"us-east-1", "us-east-2"}, regions  # the shipped stacks live in two regions
    assert sorted(expired_on_aws) == sorted(regions), expired_on_aws
    assert "gcp" not in {k for k, v in json.loads(result.stdout).items() if v}, "the AWS reaper asks Google"


def test_reap_destroy_stacks_destroys_through_the_stack(project, expired_on_aws, monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(
        reap_cli, "project_stack_destroy", lambda folder, reporter, durable: _destroyed(called)
    )
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
    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda *_: _destroyed(called))
    monkeypatch.setattr(reap_cli, "project_record", lambda folder: _holding())
    subscription = "00000000-1111-2222-3333-444444444444"
    args = ["reap", "--json", "--azure-subscription", subscription, "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert asked == [subscription] and called == ["nd-h100-lustre"], (asked, called)
    document = json.loads(result.stdout)
    assert document["azure"] == [
        {
            "subscription": subscription,
            "cluster": "ndh100",
            "cluster_id": None,
            "expires_at": WHEN,
            "resources": 19,
        }
    ], document
    (item,) = document["stacks"]
    assert (
        item["provider"] == f"azure {subscription}" and item["action"] == "destroyed (stack nd-h100-lustre)"
    )


def test_reap_destroy_stacks_dry_run_only_lists(project, expired_on_aws, monkeypatch):
    called: list[str] = []
    monkeypatch.setattr(
        reap_cli, "project_stack_destroy", lambda folder, reporter, durable: _destroyed(called)
    )
    args = ["reap", "--json", "--dry-run", "--aws-region", "us-east-1", "--destroy-stacks", str(project)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert called == []
    assert json.loads(result.stdout)["stacks"][0]["action"] == "would destroy (stack p5-fsx)"


def test_reap_exits_1_when_a_stack_destroy_fails(project, expired_on_aws, monkeypatch):
    def failing(stack: Stack, held: StackRecord) -> list[str]:
        raise LeftoversError("stack 'p5-fsx' is destroyed but these are still there: ec2 instance i-0abc")

    monkeypatch.setattr(reap_cli, "project_stack_destroy", lambda folder, reporter, durable: failing)
    result = CliRunner().invoke(app, ["reap", "--aws-region", "us-east-1", "--destroy-stacks", str(project)])
    assert result.exit_code == 1, result.output
    assert "still there" in result.output


def test_reap_refuses_a_folder_without_a_pulumi_project(tmp_path, expired_on_aws):
    args = ["reap", "--aws-region", "us-east-1", "--destroy-stacks", str(tmp_path)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "no Pulumi project" in result.output


# The destroy itself (teardown.run through the project's stack: export, pulumi destroy, leftovers) is
# tests/lifecycle/test_teardown_paths.py's, with nothing of the sequence stubbed.
