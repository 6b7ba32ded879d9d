"""The recording fixture of the Azure program's tests.

``record(spec)`` runs ``cluster_program`` (the real ``GpuClusterAzure``) under Pulumi's mocks with a
``RecordingMocks`` that keeps every registration (type, name, inputs, URN) and what ``AzureMockCloud``
computed for it (its ARM id among them). When the program raises, the exception is kept next to what was
registered (``run_offline`` would drop the registrations) when the test expects it (``record(spec,
raises=True)``); otherwise the program's exception fails the test, as a program that does not raise fails a
test that expects it to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from azure_testlib import CREATED_AT, Recording
from tests.infra.program_recording import expect

from gpufleet.infra.azure.mocks import AzureMockCloud
from gpufleet.infra.plan import RecordingMocks
from gpufleet.infra.program import cluster_program
from gpufleet.spec.model import ClusterSpec


class _Keeping(RecordingMocks):
    def __init__(self, cloud: AzureMockCloud, project: str, stack: str) -> None:
        super().__init__(cloud, project, stack)
        self.computed: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        resource_id, state = super().new_resource(args)
        self.computed[self.resources[-1].urn] = {**state, "id": resource_id}
        return resource_id, state


@pytest.fixture(scope="session")
def record() -> Callable[..., Recording]:
    """Run a spec through the Azure program under recording mocks (memoized per spec)."""
    cache: dict[str, Recording] = {}

    def run(
        spec: ClusterSpec,
        ssh_keys: tuple[str, ...] = ("ssh-ed25519 AAAAC3Nza cluster-key",),
        *,
        raises: bool = False,
    ) -> Recording:
        key = spec.model_dump_json() + repr(ssh_keys)
        if key in cache:
            return expect(cache[key], raises)
        mocks = _Keeping(AzureMockCloud(spec), "gpufleet", spec.name)
        pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.name, preview=False)
        outputs: dict[str, Any] = {}
        error: BaseException | None = None

        def body() -> pulumi.Output[Any]:
            result = cluster_program(spec, CREATED_AT, ssh_keys)
            return pulumi.Output.from_input(result).apply(outputs.update)

        try:
            pulumi.runtime.test(body)()
        except Exception as exc:
            error = exc
        recording = Recording(list(mocks.resources), outputs, error, dict(mocks.computed))
        cache[key] = recording
        return expect(recording, raises)

    return run
