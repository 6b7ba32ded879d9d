"""The offline plan of examples/gcp-a3-mega.yaml against its reviewed snapshot.

``gpufleet plan`` runs exactly this (``program.plan_spec``). When a change to the plan is intended,
rewrite it with ``.venv/bin/python -m tests.infra.plan_snapshots`` and review the diff (a test run
never writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.infra.plan_snapshots import GCP_A3_MEGA

ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = Path(__file__).parent / "snapshots" / "gcp-a3-mega.plan.json"


def test_a3_mega_plan_matches_the_reviewed_snapshot():
    assert GCP_A3_MEGA.render() == GCP_A3_MEGA.reviewed(), GCP_A3_MEGA.mismatch()


def test_a3_mega_plan_has_nine_nics_in_nine_vpcs_placement_and_lustre():
    plan = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    by_type: dict[str, list[dict]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource)
    networks = by_type["gcp:compute/network:Network"]
    assert len(networks) == 9
    assert sorted(n["inputs"]["mtu"] for n in networks) == [8244.0] * 8 + [8896.0]
    vms = [
        v for v in by_type["gcp:compute/instance:Instance"] if v["inputs"]["machineType"] == "a3-megagpu-8g"
    ]
    assert len(vms) == 2
    for vm in vms:
        subnets = [nic["subnetwork"].rsplit("/", 1)[-1] for nic in vm["inputs"]["networkInterfaces"]]
        assert subnets == ["a3mega-host"] + [f"a3mega-gpu-{i}" for i in range(8)], (vm["name"], subnets)
        assert vm["inputs"]["resourcePolicies"].endswith("/resourcePolicies/a3mega-gpu-placement"), vm["name"]
    (policy,) = by_type["gcp:compute/resourcePolicy:ResourcePolicy"]
    assert policy["inputs"]["groupPlacementPolicy"]["collocation"] == "COLLOCATED"
    (lustre,) = by_type["gcp:lustre/instance:Instance"]
    assert lustre["inputs"]["capacityGib"] == "18000"
    assert plan["outputs"]["filesystem"]["mount_source"].endswith("@tcp:/lustre")
