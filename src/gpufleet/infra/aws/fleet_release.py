"""``<cluster>-<group>-release``: the wait the provider does not do between an instant fleet and what it
stands on (AWS audit 2026-11-27 H3).

terraform-provider-aws, which pulumi-aws bridges, deletes an EC2 Fleet with ``DeleteFleets
(TerminateInstances=true)`` and, for ``type = instant``, returns at once: "Limiting waiter to non-instant
fleet types. `instant` fleet state is eventually consistent and can take 48 hours to update"
(internal/service/ec2/ec2_fleet.go, ``resourceFleetDelete``, both its aws-sdk-go and aws-sdk-go-v2
versions, read 2026-11-27). Its instances are then still shutting down, and:

- ``pulumi destroy`` deletes the launch template and the cluster placement group next, while they still
  run; "Before you can delete a placement group, it must contain no instances"
  (docs.aws.amazon.com/AWSEC2/latest/UserGuide/delete-placement-group.html) and the provider's
  ``resourcePlacementGroupDelete`` does not retry, so the destroy fails and leaves the network (NAT
  gateway included) until it is run again;
- a compute group's edit replaces its fleet (``fleet.REPLACED_ON``, deleted before its replacement): the
  new ``CreateFleet`` would run while the old instances still hold the placement group's, the ODCR's or
  the Capacity Block's capacity, and come back short.

So each fleet gets one ``pulumi.dynamic`` resource that takes the fleet's instance ids as its input:
- its create records them (no cloud call);
- its diff replaces it on any change of them (the ids change only when the fleet is replaced), deleted
  before its replacement;
- its delete terminates those instances (``TerminateInstances``, which DeleteFleets asks for anyway) and
  polls ``DescribeInstances`` until each is ``terminated`` or no longer listed, at most
  ``RELEASE_TIMEOUT_S``, then says how long it waited.

Pulumi deletes a resource's dependents before it, so on a destroy the release runs before the fleet's
delete (and so before the template's and the placement group's); the fleet instances' expiry tags
(``fleet.fleet_hosts``) depend on it and go first, while their instances still run. When the fleet is
replaced, the release is a dependent replacement (its input is the fleet's output, re-diffed as unknown:
pulumi/pulumi pkg/resource/deploy/step_generator.go, ``calculateDependentReplacements``, read
2026-11-27), deleted before the old fleet, so the new fleet is asked for only once the old capacity is
free. A plain ``pulumi destroy`` in ``stacks/`` gets the same order: the wait is in the program.

The provider is a class of this module, which the Pulumi Python runtime pickles by reference: the dynamic
provider host imports it from the program's own virtualenv (gpufleet installed there, as ``stacks/``
requires anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pulumi
import pulumi.dynamic

from gpufleet.infra.aws.lost import instance_states

RELEASE_TYPE = "pulumi-python:dynamic/gpufleet:FleetRelease"
# A p5.48xlarge takes minutes to shut down (33 network interfaces to detach); 40 minutes for a fleet of
# them is far beyond what a healthy termination takes and short of the job's own timeouts.
RELEASE_TIMEOUT_S = 2400.0
RELEASE_POLL_S = 15.0
GONE_STATES = ("terminated",)


def release(
    client: Any,
    ids: Sequence[str],
    *,
    timeout_s: float = RELEASE_TIMEOUT_S,
    poll_s: float = RELEASE_POLL_S,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> str:
    """Terminate ``ids`` and wait until each is terminated or gone; a line saying how long it took.
    Raises ``RuntimeError`` naming what still runs when ``timeout_s`` passes."""
    from botocore.exceptions import ClientError

    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    ids = sorted(set(ids))
    if not ids:
        return "no instance to release"
    live = [i for i, state in instance_states(client, ids).items() if state not in GONE_STATES]
    if live:
        try:
            client.terminate_instances(InstanceIds=live)
        except ClientError as exc:
            if not exc.response.get("Error", {}).get("Code", "").endswith(".NotFound"):
                raise
    start = clock()
    while True:
        left = {i: s for i, s in instance_states(client, ids).items() if s not in GONE_STATES}
        if not left:
            return f"{len(ids)} instance(s) terminated after {clock() - start:.0f} s"
        if clock() - start + poll_s > timeout_s:
            still = ", ".join(f"{i} ({s})" for i, s in sorted(left.items()))
            raise RuntimeError(
                f"the fleet's instances are still not terminated after {timeout_s:.0f} s: {still}; the "
                "placement group and the capacity they hold stay until they are (run the destroy again)"
            )
        sleep(poll_s)


class FleetRelease(pulumi.dynamic.ResourceProvider):
    """The dynamic provider (see the module doc)."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        return pulumi.dynamic.CreateResult(id_=str(props["fleet_id"]), outs=props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        keys = ("region", "fleet_id", "instance_ids")
        changed = [key for key in keys if olds.get(key) != news.get(key)]
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        import boto3

        client = boto3.client("ec2", region_name=props["region"])
        pulumi.log.info(f"fleet {props['fleet_id']}: " + release(client, list(props["instance_ids"] or [])))


class FleetReleaseResource(pulumi.dynamic.Resource, module="gpufleet", name="FleetRelease"):
    """The resource the provider serves (its type is ``RELEASE_TYPE``)."""


def fleet_release(
    name: str,
    *,
    region: str,
    fleet_id: pulumi.Input[str],
    instance_ids: pulumi.Input[Sequence[str]],
    opts: pulumi.ResourceOptions,
) -> FleetReleaseResource:
    """The release of one fleet's instances (``<fleet name>-release``), a dependent of the fleet."""
    return FleetReleaseResource(
        FleetRelease(),
        f"{name}-release",
        {"region": region, "fleet_id": fleet_id, "instance_ids": instance_ids},
        opts=pulumi.ResourceOptions(
            parent=opts.parent,  # no AWS provider: a dynamic resource is served by its own
            delete_before_replace=True,
            custom_timeouts=pulumi.CustomTimeouts(delete=f"{int(RELEASE_TIMEOUT_S // 60) + 5}m"),
        ),
    )
