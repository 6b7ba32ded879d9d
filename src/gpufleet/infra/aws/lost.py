"""Instances in a stack's state that EC2 no longer runs: a spot interruption, a manual termination.

Pulumi does not refresh before ``up``, so an instance terminated outside it stays in the state as it
was: for a fleet host the look-up of its address finds nothing (``fleet.lost_fleets`` replaces the
fleet), and a lost head or login node (an ``aws.ec2.Instance``) keeps its old address in the outputs,
so ``up`` changes nothing and every later ``configure`` finds the host unreachable. Before each
``up``, ``lost_instances`` asks ``DescribeInstances`` about each such instance; one that is shutting
down, terminated or no longer listed (EC2 lists a terminated instance for about an hour) is replaced
(``pulumi up --replace``): a new instance from the same launch template, with a new address, which
``configure`` then sets up again. A stopped instance is the user's to start again and stays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

# The states of an instance that is gone for good or on its way (API_InstanceState,
# docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceState.html, read 2026-11-24).
LOST_STATES = ("shutting-down", "terminated")
INSTANCE_TYPE = "aws:ec2/instance:Instance"


def instance_states(client: Any, ids: Iterable[str]) -> dict[str, str]:
    """instance id -> its state name (``running``, ``terminated``, ...), for the ids EC2 still lists.
    The ``instance-id`` filter, unlike ``InstanceIds``, answers an unknown id with nothing, not an error."""
    wanted = sorted(set(ids))
    states: dict[str, str] = {}
    if not wanted:
        return states
    for page in client.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-id", "Values": wanted}]
    ):
        for reservation in page.get("Reservations", []):
            for instance in reservation.get("Instances", []):
                states[instance["InstanceId"]] = (instance.get("State") or {}).get("Name", "")
    return states


def is_lost(states: Mapping[str, str], instance: str) -> bool:
    """Shutting down, terminated, or unlisted (terminated over an hour ago)."""
    return states.get(instance, "terminated") in LOST_STATES


def stack_region(deployment: Mapping[str, Any], outputs: Mapping[str, Any]) -> str | None:
    """A resource's region: its own ``region`` output (pulumi-aws 7), else the aws provider's."""
    if outputs.get("region"):
        return str(outputs["region"])
    for resource in deployment.get("resources") or []:
        if str(resource.get("type", "")).startswith("pulumi:providers:aws"):
            region = (resource.get("inputs") or {}).get("region") or (resource.get("outputs") or {}).get(
                "region"
            )
            if region:
                return str(region)
    return None


def lost_instances(deployment: Mapping[str, Any], client: Callable[[str | None], Any]) -> dict[str, str]:
    """URN -> why, for each single instance (head, login) in a stack's exported deployment that EC2 says
    is shutting down, terminated or gone: the next ``up`` replaces it. ``client(region)`` is an EC2
    client."""
    by_region: dict[str | None, dict[str, str]] = {}  # region -> instance id -> urn
    for resource in deployment.get("resources") or []:
        if resource.get("type") != INSTANCE_TYPE or resource.get("delete"):
            continue
        outputs = resource.get("outputs") or {}
        instance = outputs.get("id") or resource.get("id")
        if instance:
            by_region.setdefault(stack_region(deployment, outputs), {})[str(instance)] = resource["urn"]
    lost: dict[str, str] = {}
    for region, urns in by_region.items():
        states = instance_states(client(region), urns)
        for instance, urn in urns.items():
            if is_lost(states, instance):
                host = urn.rsplit("::", 1)[-1]
                lost[urn] = (
                    f"{host} ({instance}) is {states.get(instance) or 'gone'} (a manual termination or "
                    "an interruption): a new instance replaces it, with a new address; configure sets it "
                    "up again"
                )
    return lost
