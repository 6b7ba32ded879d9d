"""The recording fixtures of the AWS program's tests, on the shared harness (program_recording.py).

``plan_aws(spec)`` runs ``gpufleet.infra.program.plan_spec`` (``plan.run_offline`` with the
``AwsMockCloud``) as ``gpufleet plan`` does and also keeps, per resource URN, the provider reference each
resource was registered with: default tags live on the provider, so the tag tests follow that reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from aws_specs import CREATED_AT
from tests.infra.program_recording import intercept

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


@pytest.fixture
def plan_aws(monkeypatch):
    """Plan a spec offline; returns a ``RecordedPlan`` (resources, outputs, provider per URN)."""
    made = intercept(monkeypatch)

    def run(spec: ClusterSpec) -> RecordedPlan:
        result = program.plan_spec(spec, CREATED_AT)
        return RecordedPlan(result, dict(made[-1].providers))

    return run


@pytest.fixture
def recorded(monkeypatch):
    """The resources a run registered even when the program raised (for 'nothing was created' tests)."""
    made = intercept(monkeypatch)
    return lambda: list(made[-1].resources) if made else []
