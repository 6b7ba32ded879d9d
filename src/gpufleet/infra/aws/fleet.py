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
  target) and one override naming the group's instance type and the cluster's subnet (``SubnetId``, as
  ParallelCluster's ``fleet_manager.py`` overrides each of a queue's ``SubnetIds``; the subnet fixes the
  zone, where an ``AvailabilityZone`` override could name another zone than an existing subnet's);
- a targeted ODCR or reservation group: ``use-capacity-reservations-first`` with the template's target
  (and ``capacity-reservations-only`` there for a group); a Capacity Block: the template's market type
  and block id, which a fleet never leaves for On-Demand (``rules.FLEET_CAPACITY_BLOCK_DOC``);
- ``terminate_instances``: deleting the fleet terminates its instances.

An instant fleet cannot be modified ("You can't modify an EC2 Fleet of type request or instant",
docs.aws.amazon.com/AWSEC2/latest/UserGuide/modify-ec2-fleet.html, read 2026-11-24), yet the provider
calls ``ModifyFleet`` for any change but a tag's (terraform-provider-aws
``internal/service/ec2/ec2_fleet.go``, ``resourceFleetUpdate``): so every input but the tags is in
``replace_on_changes`` (``REPLACED_ON``) and the fleet is deleted before its replacement is created
(``delete_before_replace``: a Capacity Block or a full ODCR has no room for two fleets). A change of a
group's count, instance type, root volume, image or keys (a new template version) replaces its nodes
(``REPLACING_FIELDS``, which ``gpufleet plan`` prints). The provider's delete of an instant fleet does not
wait for its instances (AWS audit 2026-11-27 H3): ``fleet_release.py`` does, between the fleet and what
it stands on, so a destroy deletes the placement group only once it is empty and a replaced fleet is asked
for only once the old one's capacity is free. ``DELETE_TIMEOUT`` stays as a bound on DeleteFleets
itself; the wait for the instances is the release's.

EC2 answers an instant fleet that could not launch with success and an ``Errors`` list, which the
provider does not keep (no ``errors`` output in pulumi-aws 7.51). When a fleet comes short,
``launch_errors`` reads them back with ``DescribeFleets`` (whose ``Errors`` are "valid only when Type is
set to instant", API_DescribeFleets, read 2026-11-24), as ParallelCluster's ``fleet_manager.py`` does
(aws-parallelcluster-node PR #533), and the error names EC2's codes and messages. Such a fleet stays in
the stack's state; ``short_fleets`` finds it there so the next ``up`` replaces it (``--replace``)
instead of failing on it again.

A node lost later (a spot interruption, a manual termination) leaves the fleet unchanged in state, so
nothing would replace it, and its host lookup finds no instance (AWS audit 2026-11-24 N10). Before each
``up``, ``lost_fleets`` asks ``DescribeInstances`` for every instance a fleet in state holds: one that is
shutting down, terminated or gone (EC2 lists a terminated instance for about an hour) makes the next
``up`` replace its whole fleet, as a short launch does (an instant fleet cannot launch one more node:
``ModifyFleet`` refuses it), and says which host was lost. ParallelCluster replaces such static nodes
itself; gpufleet does it at the next ``up`` (a lost head or login instance too: ``lost.py``).

The fleet returns instance ids, not hosts. ``fleet_hosts`` sorts them (a stable order for as long as the
fleet lives) and gives the i-th to the group's i-th host name; each host's private IP comes from
``aws.ec2.get_instances`` filtered on its id and the states ``pending``/``running``, so the stack outputs
keep one record per host. That look-up answers an empty list for a lost instance where
``get_instance`` fails the whole program (``plan``, ``pulumi preview``): the host then gets no address and
a warning names the fleet that the next ``up`` replaces. Every instance gets a
``gpufleet:expires-at`` tag of its own (``aws.ec2.Tag``, updated in place when ``lifetime`` changes): the
launch template's tags are kept from the first ``pulumi up`` (``launch_template.KEPT``) and the provider's
default tags reach the fleet, not the instances it launches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.infra.aws.lost import instance_states, is_lost, stack_region
from gpufleet.infra.tags import AWS_EXPIRES_TAG
from gpufleet.spec.model import CapacityMode, NodeGroup, Role

FLEET_TYPE = "aws:ec2/fleet:Fleet"

# Every input of aws.ec2.Fleet that ModifyFleet would carry (all but tags): a change replaces the fleet.
REPLACED_ON = [
    "type",
    "launchTemplateConfigs",
    "targetCapacitySpecification",
    "onDemandOptions",
    "spotOptions",
    "terminateInstances",
    "terminateInstancesWithExpiration",
    "excessCapacityTerminationPolicy",
    "replaceUnhealthyInstances",
    "context",
    "validFrom",
    "validUntil",
    "fleetInstanceSets",
    "fleetState",
    "fulfilledCapacity",
    "fulfilledOnDemandCapacity",
    "region",
]

# The spec fields whose change replaces a compute group's nodes (a new fleet), as gpufleet plan says.
REPLACING_FIELDS = (
    "count",
    "instance_type",
    "root_volume_gib",
    "capacity",
    "provider.ami.id",
    "provider.zone",
    "provider.subnet_id",
    "access.ssh_public_key",
)

# terraform-provider-aws ec2_fleet.go: a 10-minute default delete timeout; for an instant fleet the
# provider waits for nothing after DeleteFleets (fleet_release.py waits for the instances instead).
DELETE_TIMEOUT = "30m"


@dataclass(frozen=True)
class FleetHost:
    """One host of a fleet: its name, its instance id and private IP (outputs)."""

    name: str
    instance_id: pulumi.Output[str]
    private_ip: pulumi.Output[str]


def launched_by_fleet(group: NodeGroup) -> bool:
    """Compute-only groups launch as one fleet; the head and login nodes stay single instances."""
    return Role.COMPUTE in group.roles and not {Role.CONTROLLER, Role.LOGIN} & set(group.roles)


class _AllOrNothing(TypedDict):
    min_target_capacity: int
    single_instance_type: bool
    single_availability_zone: bool


class FleetOptions(TypedDict, total=False):
    """A fleet's ``spot_options`` or ``on_demand_options`` (one of them)."""

    spot_options: aws.ec2.FleetSpotOptionsArgs
    on_demand_options: aws.ec2.FleetOnDemandOptionsArgs


def _all_or_nothing(count: int) -> _AllOrNothing:
    return {
        "min_target_capacity": min(count, rules.FLEET_MIN_TARGET_CAPACITY_MAX),
        "single_instance_type": True,
        "single_availability_zone": True,
    }


def fleet_options(group: NodeGroup) -> FleetOptions:
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
    subnet_id: pulumi.Input[str],
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
                        instance_type=group.instance_type, subnet_id=subnet_id
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
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                replace_on_changes=REPLACED_ON,
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(delete=DELETE_TIMEOUT),
            ),
        ),
    )


def sorted_instance_ids(sets: list[dict[str, object]] | list[object] | None) -> list[str]:
    """Every instance id of a fleet's ``fleet_instance_sets``, sorted (the host order)."""
    ids: list[str] = []
    for item in sets or []:
        found = item.get("instance_ids") if isinstance(item, dict) else getattr(item, "instance_ids", None)
        ids.extend(found or [])
    return sorted(ids)


def launch_errors(client: Any, fleet_id: str) -> list[str]:
    """EC2's own reasons an instant fleet launched too few instances (``DescribeFleets`` ``Errors``),
    one line per distinct code and message: ``InsufficientInstanceCapacity: ...``."""
    if not fleet_id:
        return []
    try:
        fleets = client.describe_fleets(FleetIds=[fleet_id]).get("Fleets") or []
    except Exception as exc:  # the reason is a bonus; the shortfall is the error
        return [f"(DescribeFleets failed: {exc})"]
    lines: list[str] = []
    for fleet in fleets:
        for error in fleet.get("Errors") or []:
            line = f"{error.get('ErrorCode', '?')}: {error.get('ErrorMessage', '')}".rstrip(": ")
            if line not in lines:
                lines.append(line)
    return lines


def _nth(
    ids: list[str],
    index: int,
    count: int,
    fleet: str,
    errors: Callable[[], list[str]] = list,
    urn: str = "",
) -> str:
    if len(ids) < count:
        reasons = errors()
        said = "; EC2 says: " + " | ".join(reasons) if reasons else ""
        # From a Pulumi project (stacks/, CI) nothing replaces the short fleet on its own: say how.
        replace = f"; from a Pulumi project: pulumi up --replace '{urn}'" if urn else ""
        raise RuntimeError(
            f"EC2 Fleet {fleet} launched {len(ids)} of {count} instances{said}. gpufleet needs every node "
            f"(an instant fleet's minimum target capacity stops at {rules.FLEET_MIN_TARGET_CAPACITY_MAX}); "
            f"fix the cause and run 'gpufleet up' again (it replaces the short fleet){replace}; or split "
            "the group"
        )
    return ids[index]


def _total(items: Any) -> int:
    return sum(len(item.get("instanceIds") or []) for item in items or [] if isinstance(item, Mapping))


def short_fleets(deployment: Mapping[str, Any]) -> list[str]:
    """The URNs of the instant fleets in a stack's exported deployment that hold fewer instances than
    their target capacity (a launch that came short): the next ``up`` replaces them."""
    urns: list[str] = []
    for resource in _fleet_resources(deployment):
        outputs = resource.get("outputs") or {}
        target = (outputs.get("targetCapacitySpecification") or {}).get("totalTargetCapacity") or 0
        if outputs.get("type") == "instant" and _total(outputs.get("fleetInstanceSets")) < int(target):
            urns.append(resource["urn"])
    return urns


TAG_TYPE = "aws:ec2/tag:Tag"


def _fleet_resources(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        resource
        for resource in deployment.get("resources") or []
        if resource.get("type") == FLEET_TYPE and not resource.get("delete")
    ]


def _host_of(deployment: Mapping[str, Any]) -> dict[str, str]:
    """instance id -> host name, from each fleet host's expiry tag (``<host>-expires``)."""
    found: dict[str, str] = {}
    for resource in deployment.get("resources") or []:
        if resource.get("type") == TAG_TYPE:
            name = str(resource.get("urn", "")).rsplit("::", 1)[-1]
            instance = (resource.get("outputs") or resource.get("inputs") or {}).get("resourceId")
            if instance and name.endswith("-expires"):
                found[str(instance)] = name.removesuffix("-expires")
    return found


def lost_fleets(deployment: Mapping[str, Any], client: Callable[[str | None], Any]) -> dict[str, str]:
    """URN -> why, for each fleet in a stack's exported deployment holding an instance that EC2 says is
    shutting down, terminated or gone: the next ``up`` replaces it. ``client(region)`` is an EC2 client."""
    lost: dict[str, str] = {}
    hosts = _host_of(deployment)
    for resource in _fleet_resources(deployment):
        outputs = resource.get("outputs") or {}
        ids = sorted(
            {i for item in outputs.get("fleetInstanceSets") or [] for i in item.get("instanceIds") or []}
        )
        if outputs.get("type") != "instant" or not ids:
            continue
        states = instance_states(client(stack_region(deployment, outputs)), ids)
        gone = [
            f"{hosts.get(i, 'its node')} ({i}) is {states.get(i) or 'gone'}"
            for i in ids
            if is_lost(states, i)
        ]
        if gone:
            lost[resource["urn"]] = (
                "; ".join(gone) + " (a spot interruption or a manual termination): its whole fleet is "
                "replaced, since an instant fleet cannot launch one node more"
            )
    return lost


def _address(ips: list[str] | None, host: str, fleet: str) -> str:
    """The private IP of a running fleet host, or '' with a warning when its instance is lost."""
    if ips:
        return ips[0]
    pulumi.log.warn(
        f"{host}: its instance in EC2 Fleet {fleet} is no longer running (a spot interruption or a manual "
        "termination); 'gpufleet up' replaces the fleet (from a Pulumi project: pulumi up --replace with the "
        "fleet's URN, 'pulumi stack --show-urns'), and until then the host has no address"
    )
    return ""


# The instance tag a fleet node reads its inventory name from at boot (gpufleet.node.boot_configure.HOST_TAG).
HOST_TAG = "gpufleet:host"


def fleet_hosts(
    fleet: aws.ec2.Fleet,
    hosts: list[str],
    *,
    expires_at: str,
    opts: pulumi.ResourceOptions,
    invoke: pulumi.InvokeOptions,
    region: str,
    name_tags: bool = False,
) -> list[FleetHost]:
    """The fleet's instances as the group's hosts, in order, each tagged with the cluster's expiry (and,
    ``name_tags``, with its host name as ``HOST_TAG``: a node that configures itself at boot reads its name
    there, through IMDS's instance tags); the fleet's release (``fleet_release.py``) waits for them on a
    destroy or a replacement, after their tags are deleted."""
    from gpufleet.infra.aws.fleet_release import fleet_release

    fleet_name = fleet.pulumi_resource_name

    def errors(fleet_id: str) -> Callable[[], list[str]]:
        def read() -> list[str]:
            import boto3

            return launch_errors(boto3.client("ec2", region_name=region), fleet_id)

        return read

    sets = pulumi.Output.all(fleet.id, fleet.fleet_instance_sets, fleet.urn)
    ids = sets.apply(lambda got: (got[0], sorted_instance_ids(got[1]), got[2]))
    released = fleet_release(
        fleet_name, region=region, fleet_id=fleet.id, instance_ids=ids.apply(lambda got: got[1]), opts=opts
    )
    tag_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[released]))
    found: list[FleetHost] = []
    for index, host in enumerate(hosts):

        def nth(got: tuple[str, list[str], str], i: int = index) -> str:
            return _nth(got[1], i, len(hosts), fleet_name, errors(got[0]), got[2])

        def address(ips: list[str], h: str = host) -> str:
            return _address(ips, h, fleet_name)

        def by_id(found_id: str) -> list[aws.ec2.GetInstancesFilterArgs]:
            return [aws.ec2.GetInstancesFilterArgs(name="instance-id", values=[found_id])]

        instance_id = ids.apply(nth)
        aws.ec2.Tag(
            f"{host}-expires", resource_id=instance_id, key=AWS_EXPIRES_TAG, value=expires_at, opts=tag_opts
        )
        if name_tags:
            aws.ec2.Tag(f"{host}-host", resource_id=instance_id, key=HOST_TAG, value=host, opts=tag_opts)
        private_ip = aws.ec2.get_instances_output(
            filters=instance_id.apply(by_id),
            instance_state_names=["pending", "running"],
            opts=invoke,
        ).private_ips.apply(address)
        found.append(FleetHost(host, instance_id, private_ip))
    return found
