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
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
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


# ---- a plan's resources in one line each (gpufleet plan, gpufleet image plan) ---------------------------

# Inputs that are bulky or secret-ish and say little in a summary line.
_SKIPPED = {"tags", "userData", "assumeRolePolicy", "policy", "description", "tagSpecifications", "labels"}
# Keys whose values, counted over a list of objects, summarize that list best.
_KIND_KEYS = ("interfaceType", "nicType", "type")
_MAX_SUMMARY = 280
# Values that only point at another resource (ids, ARNs): the plan's ids are made up, so they are noise.
_REFERENCE = re.compile(r"^([a-z]+-[0-9a-f]{8,}|arn:\S+)$")


def _scalar(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text if len(text) <= 48 else text[:45] + "..."


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and bool(_REFERENCE.match(value))


def _summary_of_list(key: str, items: list[Any]) -> str:
    items = [i for i in items if not _is_reference(i)]
    if not items:
        return ""
    if all(isinstance(i, Mapping) for i in items):
        for kind in _KIND_KEYS:
            if any(kind in i for i in items):
                counts: dict[str, int] = {}
                for item in items:
                    label = str(item.get(kind, "default"))
                    counts[label] = counts.get(label, 0) + 1
                return f"{key}=[{' + '.join(f'{n} {label}' for label, n in counts.items())}]"
        return f"{key}=[{len(items)}]"
    if len(items) <= 3:
        return f"{key}=[{', '.join(_scalar(i) for i in items)}]"
    return f"{key}=[{len(items)} items]"


def summarize(inputs: Mapping[str, Any], prefix: str = "") -> str:
    """Key properties of a resource in one line: lists of typed objects first (such as network
    interfaces counted by type), then scalars and objects one level down; references to other
    resources are left out."""
    lists: list[str] = []
    parts: list[str] = []
    for key in sorted(inputs):
        value = inputs[key]
        if key in _SKIPPED or key.startswith("__") or value in (None, [], {}) or _is_reference(value):
            continue
        if isinstance(value, Mapping):
            nested = summarize(value, prefix=f"{key}.") if not prefix else ""
            if nested:
                parts.append(nested)
        elif isinstance(value, list):
            text = _summary_of_list(prefix + key, value)
            if text:
                (lists if " + " in text or "[1 " in text else parts).append(text)
        else:
            parts.append(f"{prefix}{key}={_scalar(value)}")
    line = " ".join(lists + parts)
    return line if len(line) <= _MAX_SUMMARY else line[: _MAX_SUMMARY - 3] + "..."


def _stem(name: str) -> str:
    return re.sub(r"-?\d+$", "", name.split(" ... ")[0])


def collapse(rows: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str, int]]:
    """Fold runs of numbered resources (node-00, node-01, ...) with the same summary into one row."""
    folded: list[tuple[str, str, str, int]] = []
    for type_, name, summary in rows:
        last = folded[-1] if folded else None
        if last and last[0] == type_ and last[2] == summary and _stem(last[1]) == _stem(name) != name:
            first_type, first_name, _, count = folded[-1]
            head = first_name.split(" ... ")[0]
            folded[-1] = (first_type, f"{head} ... {name}", summary, count + 1)
        else:
            folded.append((type_, name, summary, 1))
    return folded
