"""Reserved capacity that is really used: an ODCR made in a cluster placement group, and reservation
resource groups that never fall back to on-demand."""

from __future__ import annotations

import pytest
from aws_specs import aws_spec
from pydantic import ValidationError

from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, run_checks

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-odcrs"


def test_an_odcr_made_in_a_placement_group_launches_into_it(plan_aws):
    capacity = {"mode": "reservation", "reservation": "cr-0a1b2c3d4e5f60789", "placement_group": "my-pg"}
    recorded = plan_aws(aws_spec(gpu={"capacity": capacity}))
    template = recorded.one(TEMPLATE, "fleet-gpu-lt")
    assert template.inputs.get("placement") == {"groupName": "my-pg"}, f"{template.urn}: {template.inputs}"
    assert not recorded.of_type(PLACEMENT), "no new placement group: the ODCR's own is used"
    findings = run_checks(aws_spec(gpu={"capacity": capacity}), load_catalog())
    assert any(f.level is Severity.INFO and "'my-pg'" in f.message for f in findings), findings


def test_a_reservation_without_its_placement_group_is_told_about_the_field():
    capacity = {"mode": "reservation", "reservation": "cr-0a1b2c3d4e5f60789"}
    findings = run_checks(aws_spec(gpu={"capacity": capacity}), load_catalog())
    assert any("capacity.placement_group" in f.message for f in findings if f.level is Severity.WARNING)


def test_a_reservation_group_never_falls_back_to_on_demand(plan_aws):
    recorded = plan_aws(
        aws_spec(gpu={"capacity": {"mode": "reservation", "reservation_group_arn": GROUP_ARN}})
    )
    spec = recorded.one(TEMPLATE, "fleet-gpu-lt").inputs["capacityReservationSpecification"]
    assert spec == {
        "capacityReservationPreference": "capacity-reservations-only",
        "capacityReservationTarget": {"capacityReservationResourceGroupArn": GROUP_ARN},
    }, spec


@pytest.mark.parametrize("mode", ["on_demand", "spot"])
def test_placement_group_only_with_a_reservation(mode):
    with pytest.raises(ValidationError, match="only read with mode 'reservation'"):
        aws_spec(gpu={"capacity": {"mode": mode, "placement_group": "my-pg"}})
