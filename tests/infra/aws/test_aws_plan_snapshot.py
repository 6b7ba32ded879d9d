"""The offline plan of examples/aws-p5.yaml against its reviewed snapshot.

``gpufleet plan`` runs exactly this (``program.plan_spec``). When a change to the plan is intended,
rewrite it with ``.venv/bin/python -m tests.infra.plan_snapshots`` and review the diff (a test run
never writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.infra.plan_snapshots import AWS_P5

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "aws-p5.yaml"
SNAPSHOT = Path(__file__).parent / "snapshots" / "aws-p5.plan.json"


def test_p5_plan_matches_the_reviewed_snapshot():
    assert AWS_P5.render() == AWS_P5.reviewed(), AWS_P5.mismatch()


def test_p5_snapshot_has_32_efa_per_node_placement_and_fsx():
    plan = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    by_type: dict[str, list[dict]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource)
    (template,) = [
        t for t in by_type["aws:ec2/launchTemplate:LaunchTemplate"] if t["name"] == "llm-p5-gpu-lt"
    ]
    kinds = [n["interfaceType"] for n in template["inputs"]["networkInterfaces"]]
    assert kinds.count("efa-only") == 32 and kinds[0] == "interface", kinds
    assert template["inputs"]["placement"]["groupName"].startswith("llm-p5-placement")
    assert len(by_type["aws:ec2/placementGroup:PlacementGroup"]) == 1
    (lustre,) = by_type["aws:fsx/lustreFileSystem:LustreFileSystem"]
    assert (lustre["inputs"]["deploymentType"], lustre["inputs"]["storageCapacity"]) == ("PERSISTENT_2", 2400)
    # The example links no bucket (a placeholder would fail 10-20 minutes into up; test_fsx covers the link).
    assert "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation" not in by_type
    gpu_hosts = [h for h in plan["outputs"]["hosts"] if "compute" in h["roles"]]
    assert [h["fabric_interfaces"] for h in gpu_hosts] == [32, 32]
    assert plan["cost_per_hour_usd"] is not None and plan["cost_per_hour_usd"] > 100
