"""``gpufleet plan`` through Typer's test runner: offline, the resources, the counts, the cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode
from gpufleet.infra.plan import collapse, summarize

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("offline")


def test_plan_shows_efa_placement_fsx_and_cost():
    result = runner.invoke(app, ["plan", str(ROOT / "examples" / "aws-p5.yaml")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "networkInterfaces=[1 interface + 32 efa-only]" in out, out
    assert "aws:ec2/placementGroup:PlacementGroup" in out and "strategy=cluster" in out, out
    assert "aws:fsx/lustreFileSystem:LustreFileSystem" in out and "deploymentType=PERSISTENT_2" in out, out
    # The two compute nodes are one all-or-nothing launch request (issue 10, AWS 2).
    assert "llm-p5-gpu-fleet" in out and "onDemandOptions.minTargetCapacity=2" in out, out
    assert "cost: $110.48 per hour" in out, out
    assert "resources per type" in out, out


def test_plan_json_has_resources_as_pulumi_passes_them_and_the_cost():
    result = runner.invoke(app, ["plan", str(ROOT / "examples" / "aws-p5.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cost_per_hour_usd"] == 110.48, data["cost_per_hour_usd"]
    templates = [r for r in data["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate"]
    (gpu,) = [t for t in templates if t["name"] == "llm-p5-gpu-lt"]
    kinds = [n["interfaceType"] for n in gpu["inputs"]["networkInterfaces"]]
    assert kinds.count("efa-only") == 32, kinds
    assert all(set(r) == {"type", "name", "inputs"} for r in data["resources"])
    keys = [(r["type"], r["name"]) for r in data["resources"]]
    assert keys == sorted(keys), "resources are listed in type and name order"
    assert data["counts"]["aws:ec2/instance:Instance"] == 1  # the head node
    assert data["counts"]["aws:ec2/fleet:Fleet"] == 1  # the two compute nodes, one launch request


def test_plan_of_an_invalid_spec_fails_with_the_preflight_errors(tmp_path):
    text = (
        (ROOT / "examples" / "aws-p5.yaml")
        .read_text(encoding="utf-8")
        .replace("size_gib: 2400", "size_gib: 3000")
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["plan", str(bad)])
    assert result.exit_code == ExitCode.SPEC, result.output  # the exit code of a SpecError
    assert "3000 GiB is not a size FSx for Lustre" in result.output


def test_plan_of_a_local_spec_says_there_is_nothing_to_plan():
    result = runner.invoke(app, ["plan", str(ROOT / "examples" / "local.yaml")])
    assert result.exit_code == ExitCode.SPEC, result.output  # the exit code of a SpecError
    assert "no Pulumi program" in result.output


def test_summary_counts_typed_lists_and_drops_references():
    inputs = {
        "networkInterfaces": [{"interfaceType": "interface"}] + [{"interfaceType": "efa-only"}] * 3,
        "vpcId": "vpc-0123456789abcdef0",
        "cidrBlock": "10.0.0.0/16",
        "tags": {"a": "b"},
        "metadataOptions": {"httpTokens": "required"},
    }
    assert summarize(inputs) == (
        "networkInterfaces=[1 interface + 3 efa-only] cidrBlock=10.0.0.0/16 "
        "metadataOptions.httpTokens=required"
    )


def test_collapse_folds_numbered_runs_only():
    rows = [("t", "n-0", "s"), ("t", "n-1", "s"), ("t", "n-2", "s"), ("t", "head", "s"), ("u", "x", "")]
    assert collapse(rows) == [("t", "n-0 ... n-2", "s", 3), ("t", "head", "s", 1), ("u", "x", "", 1)]


def test_plan_says_which_changes_replace_a_groups_nodes():
    """An instant fleet cannot be modified: the plan names the spec fields that make new nodes (issue 25)."""
    result = runner.invoke(app, ["plan", str(ROOT / "examples" / "aws-p5.yaml")])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "replaces nodes:" in out, out
    for field in ("count", "instance_type", "root_volume_gib", "access.ssh_public_key"):
        assert field in out.split("replaces nodes:")[1], out
    data = json.loads(runner.invoke(app, ["plan", str(ROOT / "examples" / "aws-p5.yaml"), "--json"]).output)
    assert "count" in data["replaces_nodes"] and "root_volume_gib" in data["replaces_nodes"], data


def test_a_gcp_plan_says_which_changes_replace_its_vms():
    """GCP audit 2026-11-27 M6: the capacity mode, the reservation, the NIC layout force new VMs
    (ForceNew in the provider's instance); main printed nothing for GCP."""
    data = json.loads(
        runner.invoke(app, ["plan", str(ROOT / "examples" / "gcp-a3-mega.yaml"), "--json"]).output
    )
    assert set(data["replaces_nodes"]) == {"capacity", "fabric", "provider.zone"}, data["replaces_nodes"]
