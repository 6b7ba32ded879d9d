"""A destroy and a fleet replacement of the p5 example, against AWS and the provider as they behave
(AWS audit 2026-11-27 H3).

The program runs under Pulumi's mocks with a monitor that also keeps each registration's dependencies and
computed id. The engine's order is then replayed the way Pulumi orders it: a destroy deletes a resource
only after everything that depends on it; a delete-before-replace of the fleet first deletes, in reverse
dependency order, the dependents whose inputs come from it (pulumi/pulumi step_generator.go,
``calculateDependentReplacements``, read 2026-11-27). Each delete runs against ``ShapedEc2``, a stand-in
shaped by the sources, not by gpufleet:

- ``DeleteFleets`` of an instant fleet terminates its instances and returns at once: the provider waits
  for nothing ("Limiting waiter to non-instant fleet types", terraform-provider-aws
  internal/service/ec2/ec2_fleet.go ``resourceFleetDelete``); an instance then stays ``shutting-down`` for
  a while (here four polls of 15 s) before it is ``terminated``;
- ``DeletePlacementGroup`` fails while an instance in the group is not terminated ("Before you can delete a
  placement group, it must contain no instances", docs.aws.amazon.com/AWSEC2/latest/UserGuide/
  delete-placement-group.html), and the provider does not retry (``resourcePlacementGroupDelete``);
- ``CreateFleet`` gets no instance while the capacity (the group's count: a Capacity Block or a full
  cluster placement group) is held by instances not yet terminated, and says so in ``Errors``.

gpufleet's own ``FleetRelease`` delete runs for real against the stand-in. On main at bc3d77c (no release)
the destroy failed on the placement group and the replacement's fleet came back empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pytest
from aws_specs import CREATED_AT
from botocore.exceptions import ClientError

from gpufleet.infra import program
from gpufleet.infra.aws import fleet_release
from gpufleet.infra.aws.fleet import FLEET_TYPE
from gpufleet.infra.aws.fleet_release import RELEASE_TYPE, FleetRelease
from gpufleet.infra.plan import RecordingMocks
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
TAG = "aws:ec2/tag:Tag"
SHUTDOWN_POLLS = 4


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    inputs: dict[str, Any]
    id: str
    deps: set[str]


class GraphMonitor(pulumi.runtime.mocks.MockMonitor):
    """Pulumi's mock monitor, keeping what the engine keeps: each resource's dependencies (``dependsOn``,
    its inputs' and its parent's) and the id the mocks gave it."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.graph: dict[str, Registered] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.custom:
            deps = set(request.dependencies)
            for prop in request.propertyDependencies.values():
                deps |= set(prop.urns)
            # registrations run on several threads: find this one's recorded inputs by type and name
            (inputs,) = [
                r.inputs for r in self.mocks.resources if (r.type, r.name) == (request.type, request.name)
            ]
            self.graph[response.urn] = Registered(
                response.urn, request.type, request.name, inputs, response.id, deps
            )
        return response


def planned_graph(path: Path) -> dict[str, Registered]:
    spec = load_spec(path)
    mocks = RecordingMocks(program.mock_cloud(spec), "gpufleet", spec.name)
    monitor = GraphMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.name, preview=False, monitor=monitor)
    pulumi.runtime.test(lambda: pulumi.Output.from_input(program.cluster_program(spec, CREATED_AT)))()
    return monitor.graph


@dataclass
class ShapedEc2:
    """EC2 as the module doc says it behaves, on a clock the waits advance."""

    capacity: int
    now: float = 0.0
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def launch(self, fleet: str, ids: list[str], group: str | None) -> None:
        for i in ids:
            self.instances[i] = {"fleet": fleet, "group": group, "state": "running", "left": 0}

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for instance in self.instances.values():
            if instance["state"] == "shutting-down":
                instance["left"] -= 1
                if instance["left"] <= 0:
                    instance["state"] = "terminated"

    def _shut(self, ids: list[str]) -> None:
        for i in ids:
            if self.instances[i]["state"] == "running":
                self.instances[i].update(state="shutting-down", left=SHUTDOWN_POLLS)

    # the calls gpufleet and the provider make
    def get_paginator(self, operation: str) -> Any:
        assert operation == "describe_instances", operation
        ec2 = self

        class Pages:
            def paginate(self, Filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
                (wanted,) = [f["Values"] for f in Filters if f["Name"] == "instance-id"]
                found = [
                    {"InstanceId": i, "State": {"Name": ec2.instances[i]["state"]}}
                    for i in wanted
                    if i in ec2.instances
                ]
                return [{"Reservations": [{"Instances": found}]}]

        return Pages()

    def terminate_instances(self, InstanceIds: list[str]) -> dict[str, Any]:
        self.calls.append("TerminateInstances")
        self._shut(InstanceIds)
        return {}

    def delete_fleets(self, fleet: str) -> None:
        self.calls.append("DeleteFleets")
        self._shut([i for i, inst in self.instances.items() if inst["fleet"] == fleet])

    def delete_placement_group(self, name: str) -> None:
        self.calls.append("DeletePlacementGroup")
        busy = [
            i for i, inst in self.instances.items() if inst["group"] == name and inst["state"] != "terminated"
        ]
        if busy:
            raise ClientError(
                {"Error": {"Code": "InvalidPlacementGroup.InUse", "Message": f"{name} is in use by {busy}"}},
                "DeletePlacementGroup",
            )

    def create_fleet(self, fleet: str, count: int, group: str | None) -> list[str]:
        self.calls.append("CreateFleet")
        held = sum(1 for inst in self.instances.values() if inst["state"] != "terminated")
        if self.capacity - held < count:
            return []  # the instant fleet's Errors: InsufficientInstanceCapacity
        ids = [f"i-new{n:013d}" for n in range(count)]
        self.launch(fleet, ids, group)
        return ids


@pytest.fixture
def ec2(monkeypatch) -> Any:
    def make(capacity: int) -> ShapedEc2:
        fake = ShapedEc2(capacity)
        monkeypatch.setattr("boto3.client", lambda service, region_name=None: fake)
        monkeypatch.setattr(fleet_release.time, "monotonic", lambda: fake.now)
        monkeypatch.setattr(fleet_release.time, "sleep", fake.sleep)
        return fake

    return make


def _placement_of(graph: dict[str, Registered], fleet: Registered) -> str | None:
    template_id = fleet.inputs["launchTemplateConfigs"][0]["launchTemplateSpecification"]["launchTemplateId"]
    (template,) = [r for r in graph.values() if r.type == TEMPLATE and r.id == template_id]
    return (template.inputs.get("placement") or {}).get("groupName")


def _launched(graph: dict[str, Registered], ec2: ShapedEc2) -> Registered:
    (fleet,) = [r for r in graph.values() if r.type == FLEET_TYPE]
    released = [r for r in graph.values() if r.type == RELEASE_TYPE]
    ids = released[0].inputs["instance_ids"] if released else [f"i-old{n}" for n in range(2)]
    ec2.launch(fleet.id, list(ids), _placement_of(graph, fleet))
    return fleet


def _delete(resource: Registered, ec2: ShapedEc2) -> None:
    if resource.type == FLEET_TYPE:
        ec2.delete_fleets(resource.id)
    elif resource.type == PLACEMENT:
        ec2.delete_placement_group(resource.inputs.get("name") or resource.id)
    elif resource.type == RELEASE_TYPE:
        FleetRelease().delete(resource.id, resource.inputs)


def destroy_order(graph: dict[str, Registered]) -> list[Registered]:
    """Pulumi's destroy: a resource once nothing left depends on it (reverse registration order among
    those ready, as the engine walks its snapshot backwards)."""
    left = dict(graph)
    order: list[Registered] = []
    while left:
        ready = [r for r in reversed(list(left.values())) if not any(r.urn in o.deps for o in left.values())]
        assert ready, "a dependency cycle"
        order.append(ready[0])
        del left[ready[0].urn]
    return order


def test_a_destroy_empties_the_placement_group_before_deleting_it(ec2):
    graph = planned_graph(ROOT / "examples" / "aws-p5.yaml")
    fake = ec2(capacity=2)
    fleet = _launched(graph, fake)
    assert _placement_of(graph, fleet), "the p5 example's fleet launches into a cluster placement group"
    for resource in destroy_order(graph):
        _delete(resource, fake)  # a ClientError here is the destroy failing, as pulumi destroy would
    assert fake.calls.index("TerminateInstances") < fake.calls.index("DeleteFleets")
    assert all(inst["state"] == "terminated" for inst in fake.instances.values())


def test_a_replaced_fleet_is_asked_for_once_the_old_capacity_is_free(ec2):
    """A count or image edit replaces the fleet, deleted before its replacement: its dependents whose
    inputs come from it go first, the release among them, so CreateFleet finds the capacity free."""
    graph = planned_graph(ROOT / "examples" / "aws-p5.yaml")
    fake = ec2(capacity=2)  # a Capacity Block (or a full placement group) of the group's two nodes
    fleet = _launched(graph, fake)
    replaced = {fleet.urn}
    dependents: list[Registered] = []
    for resource in graph.values():  # in registration order: the engine's dependency order
        if resource.deps & replaced and resource.type in (RELEASE_TYPE, TAG):  # re-diffed: replaced
            dependents.append(resource)
            replaced.add(resource.urn)
    for resource in reversed(dependents):
        _delete(resource, fake)
    _delete(fleet, fake)
    launched = fake.create_fleet("fleet-new", 2, _placement_of(graph, fleet))
    assert len(launched) == 2, f"the new fleet came back short: {fake.instances}"
    assert any(r.type == RELEASE_TYPE for r in dependents), "the release is not a dependent of the fleet"


def test_the_release_says_what_still_runs_when_the_wait_runs_out(ec2):
    fake = ec2(capacity=2)
    fake.launch("fleet-1", ["i-0aaa", "i-0bbb"], None)
    fake.instances["i-0bbb"]["state"] = "stopping"  # never ends in this stand-in: no shutdown countdown
    with pytest.raises(RuntimeError, match=r"i-0bbb \(stopping\)"):
        fleet_release.release(fake, ["i-0aaa", "i-0bbb", "i-0gone"], timeout_s=120)
    assert fake.instances["i-0aaa"]["state"] == "terminated"


def test_the_release_is_replaced_with_its_fleet_and_deleted_before_its_replacement():
    diff = FleetRelease().diff(
        "f",
        {"region": "r", "fleet_id": "f1", "instance_ids": ["a"]},
        {"region": "r", "fleet_id": "f2", "instance_ids": ["b"]},
    )
    assert diff.changes and set(diff.replaces) == {"fleet_id", "instance_ids"} and diff.delete_before_replace
    same = FleetRelease().diff(
        "f",
        {"region": "r", "fleet_id": "f1", "instance_ids": ["a"]},
        {"region": "r", "fleet_id": "f1", "instance_ids": ["a"]},
    )
    assert not same.changes
