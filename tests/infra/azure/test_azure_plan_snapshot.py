"""The offline plan of examples/azure-nd-h100.yaml against its reviewed snapshot, and the shape it fixes.

``gpufleet plan`` runs exactly this (``program.plan_spec``). When a change to the plan is intended,
rewrite it with ``.venv/bin/python -m tests.infra.plan_snapshots`` and review the diff (a test run
never writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.infra.plan_snapshots import AZURE_ND_H100

from gpufleet.infra.program import hourly_cost
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "azure-nd-h100.yaml"
SNAPSHOT = Path(__file__).parent / "snapshots" / "azure-nd-h100.plan.json"


def test_nd_h100_plan_matches_the_reviewed_snapshot():
    assert AZURE_ND_H100.render() == AZURE_ND_H100.reviewed(), AZURE_ND_H100.mismatch()


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
