"""Capacity modes: market options, reservation targets and the placement group choice for each."""

from __future__ import annotations

import pytest
from aws_specs import aws_spec

from gpufleet.catalog.aws import wants_cluster_placement_group
from gpufleet.spec.model import CapacityMode

LT = "aws:ec2/launchTemplate:LaunchTemplate"
FLEET = "aws:ec2/fleet:Fleet"
PG = "aws:ec2/placementGroup:PlacementGroup"
CR = "cr-0a1b2c3d4e5f60789"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/my-odcrs"

CASES = {
    "on_demand": ({"mode": "on_demand"}, True, None, None),
    # A compute group's fleet asks for spot itself (its DefaultTargetCapacityType); its template has none.
    "spot": ({"mode": "spot"}, True, None, None),
    "reservation": ({"mode": "reservation", "reservation": CR}, False, None, {"capacityReservationId": CR}),
    "reservation_group": (
        {"mode": "reservation", "reservation_group_arn": GROUP_ARN},
        False,
        None,
        {"capacityReservationResourceGroupArn": GROUP_ARN},
    ),
    "capacity_block": ({"mode": "capacity_block", "reservation": CR}, False, "capacity-block",
                       {"capacityReservationId": CR}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_capacity_mode(plan_aws, case):
    capacity, placed, market, target = CASES[case]
    recorded = plan_aws(aws_spec(gpu={"capacity": capacity}))
    template = recorded.one(LT, "fleet-gpu-lt")
    groups = recorded.of_type(PG)
    if placed:
        (group,) = groups
        assert group.inputs["strategy"] == "cluster", group.urn
        assert template.inputs["placement"]["groupName"], f"{template.urn}: not in the placement group"
    else:
        assert groups == [], (
            f"{case}: AWS rules out a new placement group, plan has {[g.urn for g in groups]}"
        )
        assert "placement" not in template.inputs, f"{template.urn}: {template.inputs.get('placement')}"
    options = template.inputs.get("instanceMarketOptions")
    assert (options or {}).get("marketType") == market, f"{template.urn}: {options}"
    fleet = recorded.one(FLEET, "fleet-gpu-fleet")
    wanted = {"spot": "spot", "capacity_block": "capacity-block"}.get(case, "on-demand")
    got_type = fleet.inputs["targetCapacitySpecification"]["defaultTargetCapacityType"]
    assert got_type == wanted, f"{fleet.urn}: {got_type}"
    if case == "spot":
        spot = fleet.inputs["spotOptions"]
        assert spot["instanceInterruptionBehavior"] == "terminate", f"{fleet.urn}: {spot}"
        assert spot["minTargetCapacity"] == 2 and spot["singleAvailabilityZone"], f"{fleet.urn}: {spot}"
    else:
        on_demand = fleet.inputs["onDemandOptions"]
        assert on_demand["minTargetCapacity"] == 2 and on_demand["singleInstanceType"], f"{fleet.urn}"
        strategy = (on_demand.get("capacityReservationOptions") or {}).get("usageStrategy")
        reserved = case.startswith("reservation")
        assert (strategy == "use-capacity-reservations-first") == reserved, f"{fleet.urn}: {strategy}"
    spec = template.inputs.get("capacityReservationSpecification")
    got = (spec or {}).get("capacityReservationTarget")
    assert got == target, f"{template.urn}: reservation target {got}"


def test_placement_rule_per_mode():
    assert [m.value for m in CapacityMode if wants_cluster_placement_group(m)] == ["on_demand", "spot"]


def test_head_node_is_never_in_the_placement_group(plan_aws):
    recorded = plan_aws(aws_spec())
    template = recorded.one(LT, "fleet-head-lt")
    assert "placement" not in template.inputs, template.urn
