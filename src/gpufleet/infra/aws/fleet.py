"""One launch request per compute group: an EC2 Fleet of type ``instant``, all or nothing.

N separate launches into one cluster placement group each take their chance at capacity and fail one by
one (``rules.PLACEMENT_DOC``); one request for the whole group either gets every node or none. So each
compute group is one ``aws.ec2.Fleet`` (``<cluster>-<group>-fleet``), as ParallelCluster's
all-or-nothing scaling strategy launches a compute resource:

- ``type: instant`` (one synchronous request, ``rules.INSTANT_FLEET_DOC``), ``TotalTargetCapacity`` the
  group's count, its capacity mode as ``DefaultTargetCapacityType`` (on-demand, spot, capacity-block);
- ``MinTargetCapacity`` the count (capped at EC2's 1,000; ``rules.FLEET_OPTIONS_DOC``) with
  ``SingleInstanceType`` and ``SingleAvailabilityZone``: below the count no instance launches;
- the group's launch template (image, interfaces in the private subnet, placement group, reservation
  target) and one override naming the group's instance type and the spec's zone;
- a targeted ODCR or reservation group: ``use-capacity-reservations-first`` with the template's target
  (and ``capacity-reservations-only`` there for a group); a Capacity Block: the template's market type
  and block id, which a fleet never leaves for On-Demand (``rules.FLEET_CAPACITY_BLOCK_DOC``);
- ``terminate_instances``: deleting the fleet terminates its instances.

The fleet returns instance ids, not hosts. ``fleet_hosts`` sorts them (a stable order for as long as the
fleet lives) and gives the i-th to the group's i-th host name; each host's private IP comes from
``aws.ec2.get_instance`` on its id, so the stack outputs keep one record per host. Every instance gets a
``gpufleet:expires-at`` tag of its own (``aws.ec2.Tag``, updated in place when ``lifetime`` changes): the
launch template's tags are kept from the first ``pulumi up`` (``launch_template.KEPT``) and the provider's
default tags reach the fleet, not the instances it launches.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.infra.tags import AWS_EXPIRES_TAG
from gpufleet.spec.model import CapacityMode, NodeGroup, Role


@dataclass(frozen=True)
class FleetHost:
    """One host of a fleet: its name, its instance id and private IP (outputs)."""

    name: str
    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]


def launched_by_fleet(group: NodeGroup) -> bool:
    """Compute-only groups launch as one fleet; the head and login nodes stay single instances."""
    return Role.COMPUTE in group.roles and not {Role.CONTROLLER, Role.LOGIN} & set(group.roles)


def _all_or_nothing(count: int) -> dict[str, object]:
    return {
        "min_target_capacity": min(count, rules.FLEET_MIN_TARGET_CAPACITY_MAX),
        "single_instance_type": True,
        "single_availability_zone": True,
    }


def fleet_options(group: NodeGroup) -> dict[str, object]:
    """The ``on_demand_options`` or ``spot_options`` of a group's fleet."""
    count = group.count
    mode = group.capacity.mode
    if mode is CapacityMode.SPOT:
        return {
            "spot_options": aws.ec2.FleetSpotOptionsArgs(
                instance_interruption_behavior="terminate", **_all_or_nothing(count)
            )
        }
    reservations = (
        aws.ec2.FleetOnDemandOptionsCapacityReservationOptionsArgs(
            usage_strategy=rules.USE_RESERVATIONS_FIRST
        )
        if mode is CapacityMode.RESERVATION
        else None
    )
    return {
        "on_demand_options": aws.ec2.FleetOnDemandOptionsArgs(
            capacity_reservation_options=reservations, **_all_or_nothing(count)
        )
    }


def build_fleet(
    name: str,
    group: NodeGroup,
    *,
    template: aws.ec2.LaunchTemplate,
    version: pulumi.Input[str],
    zone: str,
    opts: pulumi.ResourceOptions,
) -> aws.ec2.Fleet:
    return aws.ec2.Fleet(
        f"{name}-{group.name}-fleet",
        type="instant",
        launch_template_configs=[
            aws.ec2.FleetLaunchTemplateConfigArgs(
                launch_template_specification=aws.ec2.FleetLaunchTemplateConfigLaunchTemplateSpecificationArgs(
                    launch_template_id=template.id, version=version
                ),
                overrides=[
                    aws.ec2.FleetLaunchTemplateConfigOverrideArgs(
                        instance_type=group.instance_type, availability_zone=zone
                    )
                ],
            )
        ],
        target_capacity_specification=aws.ec2.FleetTargetCapacitySpecificationArgs(
            default_target_capacity_type=rules.fleet_target_capacity_type(group.capacity.mode),
            total_target_capacity=group.count,
        ),
        terminate_instances=True,
        tags={"gpufleet:group": group.name},
        **fleet_options(group),
        opts=opts,
    )


def sorted_instance_ids(sets: list[dict[str, object]] | list[object] | None) -> list[str]:
    """Every instance id of a fleet's ``fleet_instance_sets``, sorted (the host order)."""
    ids: list[str] = []
    for item in sets or []:
        found = item.get("instance_ids") if isinstance(item, dict) else getattr(item, "instance_ids", None)
        ids.extend(found or [])
    return sorted(ids)


def _nth(ids: list[str], index: int, count: int, fleet: str) -> str:
    if len(ids) < count:
        raise RuntimeError(
            f"EC2 Fleet {fleet} launched {len(ids)} of {count} instances; gpufleet needs every node "
            f"(an instant fleet's minimum target capacity stops at {rules.FLEET_MIN_TARGET_CAPACITY_MAX}): "
            "run 'gpufleet down' and retry, or split the group"
        )
    return ids[index]


def fleet_hosts(
    fleet: aws.ec2.Fleet,
    hosts: list[str],
    *,
    expires_at: str,
    opts: pulumi.ResourceOptions,
    invoke: pulumi.InvokeOptions,
) -> list[FleetHost]:
    """The fleet's instances as the group's hosts, in order, each tagged with the cluster's expiry."""
    ids = fleet.fleet_instance_sets.apply(sorted_instance_ids)
    fleet_name = fleet.pulumi_resource_name
    found: list[FleetHost] = []
    for index, host in enumerate(hosts):
        instance_id = ids.apply(lambda all_ids, i=index: _nth(all_ids, i, len(hosts), fleet_name))
        aws.ec2.Tag(
            f"{host}-expires", resource_id=instance_id, key=AWS_EXPIRES_TAG, value=expires_at, opts=opts
        )
        private_ip = aws.ec2.get_instance_output(instance_id=instance_id, opts=invoke).private_ip
        found.append(FleetHost(host, instance_id, private_ip))
    return found
