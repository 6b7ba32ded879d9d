"""What the filesystem exporters share (``infra/aws/fsx_export.py``, ``infra/gcp/lustre_export.py``,
``infra/azure/lustre_export.py``): the
module that exports each filesystem kind that has a durable copy (which kinds those are, and which are
made with the cluster, is the spec's: ``gpufleet.spec.durable``), the error that stops
``gpufleet down`` when a filesystem's files have not reached their durable copy, and the bounded wait for
a cloud's export. Like the backend table, the table names modules, imported when used (boto3 and
google-auth stay out of ``gpufleet --help``); a provider folder's module knows its own provider.

``gpufleet down`` exports a filesystem that has a durable copy (an FSx data repository association, a
Managed Lustre ``data_repository``) before anything is destroyed (``lifecycle/durable_copy.py``); an
export that fails or outlasts ``--export-timeout`` raises ``ExportRefused`` and nothing is destroyed.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from gpufleet.errors import ProvisionError
from gpufleet.progress import Reporter
from gpufleet.spec.durable import durable_copy_of
from gpufleet.spec.model import ClusterSpec

DISCARD_FLAG = "--discard-checkpoints"
TIMEOUT_FLAG = "--export-timeout"


class ExportRefused(ProvisionError):
    """The filesystem's files did not reach their durable copy: ``down`` destroyed nothing (exit 4)."""


def refuse(what: str, status: str, *, retry: str) -> ExportRefused:
    """The refusal: what was exported where (``what``), what came of it, and the fixes."""
    return ExportRefused(
        f"not destroying the cluster: {what} did not reach its durable copy ({status}); nothing was "
        "destroyed",
        hint=f"{retry}; or, to delete the filesystem and every file on it that has no copy, run "
        f"'gpufleet down SPEC {DISCARD_FLAG}'",
    )


@dataclass
class Wait:
    """How long ``down`` waits for an export, and how it polls. ``clock`` and ``sleep`` are injectable
    so that tests run in no time."""

    timeout_s: float
    poll_s: float = 15.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _deadline: float | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        if self._deadline is None:
            self._deadline = self.clock() + self.timeout_s

    def expired(self) -> bool:
        self.start()
        assert self._deadline is not None
        return self.clock() >= self._deadline

    def pause(self) -> None:
        """Sleep one poll interval, or less when the deadline is nearer."""
        self.start()
        assert self._deadline is not None
        self.sleep(max(0.0, min(self.poll_s, self._deadline - self.clock())))

    def elapsed_s(self) -> float:
        self.start()
        assert self._deadline is not None
        return self.clock() - (self._deadline - self.timeout_s)


class Exporter(Protocol):
    """A filesystem kind's exporter (a module): ``export`` copies the filesystem to its durable copy and
    waits, raising ``ExportRefused``; ``discard`` prepares destroying it without (``--discard-checkpoints``)
    and never raises for the cloud's API. Both return lines for the teardown report."""

    def export(self, spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]: ...

    def discard(self, spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]: ...


# The module that exports each filesystem kind that can have a durable copy
# (``gpufleet.spec.durable.WITH_A_DURABLE_COPY``, the same kinds: tests/lifecycle/test_durable_copy.py).
EXPORTERS: dict[str, str] = {
    "fsx_lustre": "gpufleet.infra.aws.fsx_export",
    "managed_lustre": "gpufleet.infra.gcp.lustre_export",
    "azure_lustre": "gpufleet.infra.azure.lustre_export",
}


def exporter_for(spec: ClusterSpec) -> Exporter | None:
    """The exporter of the cluster's filesystem, None when it has no durable copy."""
    if durable_copy_of(spec) is None:
        return None
    return cast(Exporter, importlib.import_module(EXPORTERS[spec.filesystem.kind]))
