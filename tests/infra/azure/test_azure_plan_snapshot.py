"""The offline plan of examples/azure-nd-h100.yaml against its reviewed snapshot, and the shape it fixes.

``gpufleet plan`` runs exactly this (``program.plan_spec``). When a change to the plan is intended,
regenerate with ``GPUFLEET_UPDATE_SNAPSHOTS=1 pytest tests/infra/azure`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from azure_testlib import CREATED_AT

from gpufleet.infra.program import hourly_cost, plan_spec
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "azure-nd-h100.yaml"
SNAPSHOT = Path(__file__).parent / "snapshots" / "azure-nd-h100.plan.json"


def render(path: Path) -> str:
    plan = plan_spec(load_spec(path), CREATED_AT)
    data = {
        "resources": [r.to_json() for r in sorted(plan.resources, key=lambda r: (r.type, r.name))],
        "outputs": plan.outputs,
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_nd_h100_plan_matches_the_reviewed_snapshot():
    rendered = render(EXAMPLE)
    if os.environ.get("GPUFLEET_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(rendered, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    assert rendered == expected, (
        f"the plan of {EXAMPLE.name} differs from {SNAPSHOT.name}; if intended, regenerate with "
        "GPUFLEET_UPDATE_SNAPSHOTS=1 and review the diff"
    )


def test_the_plan_has_a_scale_set_per_ib_domain_no_public_ip_on_nodes_and_nat_for_egress():
    plan = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    by_type: dict[str, list[dict]] = {}
    for resource in plan["resources"]:
        by_type.setdefault(resource["type"], []).append(resource)
    (scale_set,) = by_type["azure-native:compute:VirtualMachineScaleSet"]
    assert scale_set["inputs"]["orchestrationMode"] == "Flexible"
    assert scale_set["inputs"]["singlePlacementGroup"] is True
    gpu_vms = [v for v in by_type["azure-native:compute:VirtualMachine"] if "-gpu-" in v["name"]]
    assert len(gpu_vms) == 2
    assert all(
        v["inputs"]["virtualMachineScaleSet"]["id"].endswith("/virtualMachineScaleSets/ndh100-gpu-ib")
        for v in gpu_vms
    )
    nics = by_type["azure-native:network:NetworkInterface"]
    assert len(nics) == 3
    assert not any("publicIPAddress" in c for nic in nics for c in nic["inputs"]["ipConfigurations"])
    assert sorted(p["name"] for p in by_type["azure-native:network:PublicIPAddress"]) == [
        "ndh100-bastion-ip",
        "ndh100-nat-ip",
    ]
    (nat,) = by_type["azure-native:network:NatGateway"]
    nodes = next(s for s in by_type["azure-native:network:Subnet"] if s["name"] == "ndh100-nodes")
    assert nodes["inputs"]["natGateway"]["id"].endswith(f"/natGateways/{nat['inputs']['natGatewayName']}")
    assert nodes["inputs"]["defaultOutboundAccess"] is False
    (amlfs,) = by_type["azure-native:storagecache:AmlFilesystem"]
    assert amlfs["inputs"]["hsm"]["settings"]["container"].endswith("/containers/checkpoints")
    assert plan["outputs"]["filesystem"]["mount_source"].endswith("@tcp:/lustrefs")


def test_the_cost_is_the_catalogs_retail_prices():
    total, lines = hourly_cost(load_spec(EXAMPLE))
    assert total == round(0.384 + 2 * 98.32, 2), lines
    assert {line["price_region"] for line in lines} == {"eastus"}, lines
