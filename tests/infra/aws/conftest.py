"""One recording fixture for the AWS program under Pulumi's mocks, and spec builders.

``plan_aws(spec)`` runs ``gpufleet.infra.program.plan_spec`` (``plan.run_offline`` with the
``AwsMockCloud``) and also keeps, per resource URN, the provider reference each resource was
registered with: default tags live on the provider, so the tag tests follow that reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aws_specs import CREATED_AT

from gpufleet.infra import plan as plan_module
from gpufleet.infra import program
from gpufleet.infra.plan import Plan, PlannedResource
from gpufleet.spec import ClusterSpec


@dataclass
class RecordedPlan:
    plan: Plan
    providers: dict[str, str | None]

    @property
    def resources(self) -> list[PlannedResource]:
        return self.plan.resources

    @property
    def outputs(self) -> dict[str, Any]:
        return self.plan.outputs

    def of_type(self, type_: str) -> list[PlannedResource]:
        return self.plan.of_type(type_)

    def one(self, type_: str, name: str) -> PlannedResource:
        found = [r for r in self.plan.resources if r.type == type_ and r.name == name]
        assert len(found) == 1, f"expected one {type_} named {name}; plan has {[r.urn for r in found]}"
        return found[0]


class _ProviderRecordingMocks(plan_module.RecordingMocks):
    last: _ProviderRecordingMocks | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.providers: dict[str, str | None] = {}
        _ProviderRecordingMocks.last = self

    def new_resource(self, args):  # type: ignore[no-untyped-def]
        result = super().new_resource(args)
        self.providers[self.resources[-1].urn] = args.provider
        return result


@pytest.fixture
def plan_aws(monkeypatch):
    """Plan a spec offline; returns a ``RecordedPlan`` (resources, outputs, provider per URN)."""
    monkeypatch.setattr(plan_module, "RecordingMocks", _ProviderRecordingMocks)

    def run(spec: ClusterSpec) -> RecordedPlan:
        result = program.plan_spec(spec, CREATED_AT)
        mocks = _ProviderRecordingMocks.last
        assert mocks is not None
        return RecordedPlan(result, dict(mocks.providers))

    return run


@pytest.fixture
def recorded(monkeypatch):
    """The resources a run registered even when the program raised (for 'nothing was created' tests)."""
    monkeypatch.setattr(plan_module, "RecordingMocks", _ProviderRecordingMocks)
    _ProviderRecordingMocks.last = None
    return lambda: list(_ProviderRecordingMocks.last.resources) if _ProviderRecordingMocks.last else []
