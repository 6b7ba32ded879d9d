"""The offline plan of examples/gcp-a3-mega.yaml against its reviewed snapshot.

``gpufleet plan`` runs exactly this (``program.plan_spec``). When a change to the plan is intended,
regenerate with ``GPUFLEET_UPDATE_SNAPSHOTS=1 pytest tests/infra/gcp`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gcp_testlib import CREATED_AT

from gpufleet.infra.program import plan_spec
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = Path(__file__).parent / "snapshots" / "gcp-a3-mega.plan.json"


def render(path: Path) -> str:
    plan = plan_spec(load_spec(path), CREATED_AT)
    data = {
        "resources": [r.to_json() for r in sorted(plan.resources, key=lambda r: (r.type, r.name))],
        "outputs": plan.outputs,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_a3_mega_plan_matches_the_reviewed_snapshot():
    rendered = render(ROOT / "examples" / "gcp-a3-mega.yaml")
    if os.environ.get("GPUFLEET_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(rendered, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    assert rendered == expected, (
        f"the plan of examples/gcp-a3-mega.yaml differs from {SNAPSHOT.name}; if intended, regenerate with "
        "GPUFLEET_UPDATE_SNAPSHOTS=1 and review the diff"
    )


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
