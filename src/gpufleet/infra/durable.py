"""What the filesystem exporters share (``infra/aws/fsx_export.py``, ``infra/gcp/lustre_export.py``): the
error that stops ``gpufleet down`` when a filesystem's files have not reached their durable copy, and the
bounded wait for a cloud's export.

``gpufleet down`` exports a filesystem that has a durable copy (an FSx data repository association, a
Managed Lustre ``data_repository``) before anything is destroyed (``lifecycle/durable_copy.py``); an
export that fails or outlasts ``--export-timeout`` raises ``ExportRefused`` and nothing is destroyed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.errors import ProvisionError

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
