"""Run a cluster's Pulumi program offline, under Pulumi's own unit-test mocks, and record what it creates.

No credentials, no Pulumi CLI, no engine: ``pulumi.runtime.set_mocks`` swaps the engine for a
``RecordingMocks`` that records every resource registration with its inputs as Pulumi passes them, and
answers with realistic computed fields (ids, ARNs, IPs) so that dependent resources resolve. Each cloud
module supplies a ``MockCloud``: the computed fields its resource types return and the answers to the
provider functions (invokes) its program calls, such as an AMI lookup.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi

from gpufleet.infra.stack_access import TLS_PRIVATE_KEY, mock_private_key


@dataclass(frozen=True)
class PlannedResource:
    type: str
    name: str
    inputs: dict[str, Any]
    urn: str

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "inputs": self.inputs}


class MockCloud(Protocol):
    """What a cloud module tells the mocks about its provider."""

    def computed(self, type_: str, name: str, inputs: Mapping[str, Any], serial: int) -> dict[str, Any]:
        """Fields the provider would compute for a new resource (merged over its inputs)."""
        ...

    def invoke(self, token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The result of a provider function such as ``aws:ec2/getAmi:getAmi``."""
        ...


DYNAMIC_PROVIDER_KEY = "__provider"  # pulumi.dynamic's input that carries the provider


def fake_id(prefix: str, name: str, length: int = 17) -> str:
    """A stable, realistic-looking id such as ``i-0a1b2c...`` derived from the resource name."""
    return f"{prefix}{hashlib.sha256(name.encode()).hexdigest()[:length]}"


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self, cloud: MockCloud, project: str, stack: str) -> None:
        self.cloud = cloud
        self.project = project
        self.stack = stack
        self.resources: list[PlannedResource] = []
        self._serial = itertools.count()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        serial = next(self._serial)
        urn = f"urn:pulumi:{self.stack}::{self.project}::{args.typ}::{args.name}"
        # A dynamic resource's provider is its class, pickled (a secret blob): its type names it already.
        inputs = {key: value for key, value in args.inputs.items() if key != DYNAMIC_PROVIDER_KEY}
        self.resources.append(PlannedResource(args.typ, args.name, inputs, urn))
        state = dict(args.inputs)
        if args.typ == TLS_PRIVATE_KEY:  # the stacks/ program's key (pulumi-tls): no cloud's
            state.update(mock_private_key(state))
        else:
            state.update(self.cloud.computed(args.typ, args.name, args.inputs, serial))
        resource_id = state.pop("id", None) or fake_id("id-", args.name)
        return resource_id, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        return self.cloud.invoke(args.token, args.args), []


@dataclass
class Plan:
    resources: list[PlannedResource]
    outputs: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> Counter[str]:
        return Counter(resource.type for resource in self.resources)

    def of_type(self, type_: str) -> list[PlannedResource]:
        return [resource for resource in self.resources if resource.type == type_]


def run_offline(
    program: Callable[[], Any],
    cloud: MockCloud,
    *,
    project: str = "gpufleet",
    stack: str = "plan",
) -> Plan:
    """Run ``program`` (which registers resources and returns its outputs, or an Output of them) offline.

    The program's own exceptions (an invalid spec, say) propagate unchanged.
    """
    mocks = RecordingMocks(cloud, project, stack)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    resolved: dict[str, Any] = {}

    def body() -> pulumi.Output[Any]:
        result = program()
        return pulumi.Output.from_input(result if result is not None else {}).apply(resolved.update)

    pulumi.runtime.test(body)()
    return Plan(resources=mocks.resources, outputs=resolved)
