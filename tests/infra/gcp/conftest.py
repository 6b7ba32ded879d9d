"""The recording fixture of the GCP program's tests.

``record(spec)`` runs ``cluster_program`` (the real ``GpuClusterGcp``) under Pulumi's mocks through the
shared harness (tests/infra/program_recording.py), answered by ``GcpMockCloud``.
It returns a ``Recording``. A program that raises fails the test with its own exception, unless the test
says it expects one (``record(spec, raises=True)``): then the exception is kept next to what was
registered (``run_offline`` would drop the registrations), and a program that does not raise fails it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gcp_testlib import CREATED_AT, Recording
from tests.infra.program_recording import expect, run_program

from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.program import cluster_program
from gpufleet.spec.model import ClusterSpec


@pytest.fixture(scope="session")
def record() -> Callable[..., Recording]:
    """Run a spec through the GCP program under recording mocks (memoized per spec)."""
    cache: dict[str, Recording] = {}

    def run(spec: ClusterSpec, *, raises: bool = False) -> Recording:
        key = spec.model_dump_json()
        if key not in cache:
            cache[key] = _record(spec)
        return expect(cache[key], raises)

    return run


def _record(spec: ClusterSpec) -> Recording:
    """Run ``spec`` through the program under recording mocks, keeping what it raised."""
    run = run_program(lambda: cluster_program(spec, CREATED_AT), GcpMockCloud(spec), spec.name)
    return Recording(resources=run.resources, outputs=run.outputs, error=run.error)
