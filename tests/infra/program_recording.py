"""The one harness for a cluster's Pulumi program under Pulumi's mocks (the AWS, GCP and Azure tests).

- ``KeepingMocks``: gpufleet's own ``RecordingMocks`` (every registration: type, name, inputs, URN), which
  also keeps, per URN, the provider reference a resource was registered with (AWS's default tags live on
  the provider) and what the mock cloud computed for it (Azure's ARM ids).
- ``run_program``: runs a program under ``KeepingMocks`` and keeps what it raised next to what it
  registered (``plan.run_offline`` would drop the registrations).
- ``intercept``: makes every ``RecordingMocks`` gpufleet's own code builds (``program.plan_spec``, a cloud
  bake's preview) a ``KeepingMocks``, listed in the order they were made.
- ``expect``: a program that raises fails the test that did not expect it, with the program's own exception,
  and a program that finishes fails the test that expected it to raise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pulumi
import pytest

from gpufleet.infra import plan as plan_module
from gpufleet.infra.plan import MockCloud, PlannedResource, RecordingMocks


class KeepingMocks(RecordingMocks):
    def __init__(self, cloud: MockCloud, project: str, stack: str) -> None:
        super().__init__(cloud, project, stack)
        self.providers: dict[str, str | None] = {}
        self.computed: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        resource_id, state = super().new_resource(args)
        # Pulumi registers from several threads: the URN comes from args, never from resources[-1], which may
        # already be another thread's resource (a scale set once kept a virtual network's id that way).
        urn = f"urn:pulumi:{self.stack}::{self.project}::{args.typ}::{args.name}"
        self.providers[urn] = args.provider
        self.computed[urn] = {**state, "id": resource_id}
        return resource_id, state


@dataclass
class ProgramRun:
    mocks: KeepingMocks
    outputs: dict[str, Any]
    error: BaseException | None

    @property
    def resources(self) -> list[PlannedResource]:
        return list(self.mocks.resources)


def run_program(program: Callable[[], Any], cloud: MockCloud, stack: str) -> ProgramRun:
    """``program`` (it registers resources and returns its outputs) under ``KeepingMocks`` answered by
    ``cloud``, keeping what it raised."""
    mocks = KeepingMocks(cloud, "gpufleet", stack)
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=stack, preview=False)
    outputs: dict[str, Any] = {}
    error: BaseException | None = None

    def body() -> pulumi.Output[Any]:
        result = program()
        return pulumi.Output.from_input(result if result is not None else {}).apply(outputs.update)

    try:
        pulumi.runtime.test(body)()
    except Exception as exc:
        error = exc
    return ProgramRun(mocks, outputs, error)


def intercept(monkeypatch: pytest.MonkeyPatch) -> list[KeepingMocks]:
    """From now on (for the test), the mocks gpufleet's code builds keep providers and computed state; the
    list fills as it builds them."""
    made: list[KeepingMocks] = []

    class Listed(KeepingMocks):
        def __init__(self, cloud: MockCloud, project: str, stack: str) -> None:
            super().__init__(cloud, project, stack)
            made.append(self)

    monkeypatch.setattr(plan_module, "RecordingMocks", Listed)
    return made


class _Recorded(Protocol):
    @property
    def error(self) -> BaseException | None: ...


R = TypeVar("R", bound=_Recorded)


def expect(recording: R, raises: bool) -> R:
    """``recording`` when the program raised exactly when the test expects it to."""
    if recording.error is not None and not raises:
        raise recording.error
    if recording.error is None and raises:
        pytest.fail("the program was expected to raise and finished")
    return recording
