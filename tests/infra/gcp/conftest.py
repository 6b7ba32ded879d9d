"""The recording fixture of the GCP program's tests.

``record(spec)`` runs ``cluster_program`` (the real ``GpuClusterGcp``) under Pulumi's mocks with a
``RecordingMocks`` that keeps every registration (type, name, inputs, URN), answered by ``GcpMockCloud``.
It returns a ``Recording``; when the program raises, the exception is kept next to what was registered
(``run_offline`` would drop the registrations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from gcp_testlib import CREATED_AT, Recording

from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.plan import RecordingMocks
from gpufleet.infra.program import cluster_program
from gpufleet.spec.model import ClusterSpec


@pytest.fixture(scope="session")
def record() -> Callable[[ClusterSpec], Recording]:
    """Run a spec through the GCP program under recording mocks (memoized per spec)."""
    cache: dict[str, Recording] = {}

    def run(spec: ClusterSpec) -> Recording:
        key = spec.model_dump_json()
        if key in cache:
            return cache[key]
        mocks = RecordingMocks(GcpMockCloud(spec), "gpufleet", spec.name)
        pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.name, preview=False)
        outputs: dict[str, Any] = {}
        error: BaseException | None = None

        def body() -> pulumi.Output[Any]:
            result = cluster_program(spec, CREATED_AT)
            return pulumi.Output.from_input(result).apply(outputs.update)

        try:
            pulumi.runtime.test(body)()
        except Exception as exc:
            error = exc
        recording = Recording(resources=list(mocks.resources), outputs=outputs, error=error)
        cache[key] = recording
        return recording

    return run
