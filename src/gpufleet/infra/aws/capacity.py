"""How each node group's machines are bought, and where they are placed.

Creates:
- ``<name>-placement``: one cluster placement group, when any compute group is bought on demand or on
  spot. Groups on a capacity reservation or a Capacity Block get none (``rules.wants_cluster_placement_group``
  says why, with AWS's pages). A group on an ODCR made inside a cluster placement group launches into
  that existing group, named in ``capacity.placement_group``.

``market_args`` gives the launch template arguments of a group's capacity mode:
- on_demand: none;
- spot: ``instance_market_options`` with market ``spot``, one-time requests, terminate on interruption;
- reservation: ``capacity_reservation_specification`` targeting the reservation id (``cr-...``) or the
  capacity reservation resource group ARN, the latter with preference ``capacity-reservations-only`` (no
  silent fall-back to on-demand capacity);
- capacity_block: market ``capacity-block`` and the block's reservation id as the target.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.spec.model import Capacity, CapacityMode, ClusterSpec, NodeGroup, Role

SPOT_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-instances.html"


def in_placement_group(group: NodeGroup) -> bool:
    """Compute groups bought on demand or on spot go into the cluster placement group; no other does."""
    return Role.COMPUTE in group.roles and rules.wants_cluster_placement_group(group.capacity.mode)


def needs_placement_group(spec: ClusterSpec) -> bool:
    return any(in_placement_group(group) for group in spec.node_groups)


def placement_group_of(group: NodeGroup, created: aws.ec2.PlacementGroup | None) -> pulumi.Input[str] | None:
    """The placement group a group's instances launch into: the one gpufleet made, the existing one an
    ODCR was created in (``capacity.placement_group``), or none."""
    if group.capacity.placement_group is not None:
        return group.capacity.placement_group
    if created is not None and in_placement_group(group):
        return created.name
    return None


def build_placement_group(name: str, opts: pulumi.ResourceOptions) -> aws.ec2.PlacementGroup:
    return aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster", opts=opts)


def _target(capacity: Capacity) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs:
    # A resource group target alone lets EC2 fall back to on-demand capacity when the group has none
    # free; 'capacity-reservations-only' makes such a launch fail instead (rules.RESERVATION_ONLY_DOC).
    only = rules.RESERVATION_ONLY if capacity.reservation_group_arn is not None else None
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_preference=only,
        capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=capacity.reservation,
            capacity_reservation_resource_group_arn=capacity.reservation_group_arn,
        ),
    )


def market_args(capacity: Capacity) -> dict[str, Any]:
    mode = capacity.mode
    if mode is CapacityMode.ON_DEMAND:
        return {}
    if mode is CapacityMode.SPOT:
        return {
            "instance_market_options": aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                    spot_instance_type="one-time",
                    instance_interruption_behavior="terminate",
                ),
            )
        }
    if mode is CapacityMode.RESERVATION:
        return {"capacity_reservation_specification": _target(capacity)}
    if mode is not CapacityMode.CAPACITY_BLOCK:
        raise ValueError(f"capacity mode {mode.value} has no AWS launch arguments (preflight refuses it)")
    return {
        "instance_market_options": aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="capacity-block"
        ),
        "capacity_reservation_specification": _target(capacity),
    }


def spot_tag_resource_types(capacity: Capacity) -> tuple[str, ...]:
    """Extra resource types a launch template tags for this mode (spot requests are their own)."""
    return ("spot-instances-request",) if capacity.mode is CapacityMode.SPOT else ()
