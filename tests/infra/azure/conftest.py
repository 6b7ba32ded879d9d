"""The recording fixture of the Azure program's tests.

``record(spec)`` runs ``cluster_program`` (the real ``GpuClusterAzure``) under Pulumi's mocks through the
shared harness (tests/infra/program_recording.py): every registration (type, name, inputs, URN) and what
``AzureMockCloud`` computed for it (its ARM id among them). When the program raises, the exception is kept
next to what was registered (``run_offline`` would drop the registrations) when the test expects it
(``record(spec, raises=True)``); otherwise the program's exception fails the test, as a program that does not
raise fails a test that expects it to.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from azure_testlib import CREATED_AT, Recording
from tests.infra.program_recording import expect, run_program

from gpufleet.infra.azure.mocks import AzureMockCloud
from gpufleet.infra.program import cluster_program
from gpufleet.spec.model import ClusterSpec


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
        run = run_program(
            lambda: cluster_program(spec, CREATED_AT, ssh_keys), AzureMockCloud(spec), spec.name
        )
        recording = Recording(run.resources, run.outputs, run.error, dict(run.mocks.computed))
        cache[key] = recording
        return expect(recording, raises)

    return run
