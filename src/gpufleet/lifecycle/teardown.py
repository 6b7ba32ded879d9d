"""Teardown, the same for every backend: destroy, look for leftovers, and only then forget the cluster.

``down`` asks the backend to destroy what the cluster made, then asks what is still there. When nothing
is, the backend drops its own record (a Pulumi stack) and the state folder goes last; when something is,
both stay, so that ``gpufleet down`` can be run again. Before anything is destroyed, the utilization report
of the cluster's life is written out of its Prometheus (``gpufleet.monitoring.teardown_report``); when
Prometheus cannot be read the report says why, and teardown goes on. Before that, a filesystem with a
durable copy is exported to it (``lifecycle.durable_copy``); when the export fails or times out, ``down``
raises ``ExportRefused`` (exit 4) and destroys nothing. ``Teardown.raise_for_leftovers`` is the one place
that turns leftovers into ``LeftoversError`` (exit 9).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.errors import LeftoversError, StateError, writing
from gpufleet.infra.adopted import adopted_of
from gpufleet.infra.backend import backend_for
from gpufleet.lifecycle.durable_copy import DurableCopyOptions, before_destroy
from gpufleet.monitoring.teardown_report import reports_dir, save_before_teardown
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState


@dataclass
class Teardown:
    cluster: str = ""
    # The Pulumi stack of a cluster adopted from a project (``gpufleet adopt``): the name the user's own
    # ``pulumi`` commands and CI know it by, which differs from the cluster's. None: gpufleet made the stack.
    stack: str | None = None
    removed: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    utilization: dict[str, Any] = field(default_factory=dict)  # where the report went, or why there is none
    durable_copy: list[str] = field(default_factory=list)  # the filesystem's export, or why there was none
    logs: str | None = None  # where the logs of a failed phase were kept (``keep_failed_logs``)

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "removed": self.removed,
            "leftovers": self.leftovers,
            "utilization": self.utilization,
            "durable_copy": self.durable_copy,
            "logs": self.logs,
        }

    def named(self) -> str:
        """The cluster as the user knows it: its name, and its Pulumi stack when it was adopted."""
        return f"cluster {self.cluster}" + (f", stack {self.stack}" if self.stack else "")

    def raise_for_leftovers(self) -> None:
        if self.leftovers:
            raise LeftoversError(
                f"teardown of cluster '{self.cluster}'"
                + (f" (Pulumi stack '{self.stack}')" if self.stack else "")
                + " finished but these are still there: "
                + ", ".join(self.leftovers),
                hint="run 'gpufleet down' again (the state folder is kept until nothing is left); if they "
                "stay, remove them by hand",
            )


def down(
    spec: ClusterSpec,
    state: ClusterState,
    reporter: Reporter,
    durable: DurableCopyOptions | None = None,
) -> Teardown:
    """Export the filesystem to its durable copy (or refuse), then destroy the cluster's resources; report
    what was removed and what is still there."""
    durable_copy = before_destroy(spec, reporter, durable or DurableCopyOptions())
    backend = backend_for(spec)
    try:
        adopted = adopted_of(state)
    except StateError:  # a damaged record: down still removes the cluster (found by its labels or stack)
        adopted = None
    report = Teardown(cluster=spec.name, stack=adopted.stack if adopted else None)
    report.durable_copy = durable_copy
    report.utilization = save_before_teardown(state, reporter)
    report.removed.extend(backend.destroy(spec, state, reporter))
    report.leftovers = backend.leftovers(spec, state, reporter)
    if not report.leftovers:
        report.removed.extend(backend.forget(spec, state))
        beside = Path(str(report.utilization.get("dir") or reports_dir(spec.name)))
        report.logs = keep_failed_logs(state, beside)
        if report.logs:
            reporter.info(f"the logs of the failed phase(s) are kept in {report.logs}")
        report.removed.extend(state.remove())
    return report


def keep_failed_logs(state: ClusterState, reports: Path) -> str | None:
    """When a phase of the cluster failed or was interrupted, copy its logs (Ansible's, validation's) out of
    the state folder, which teardown removes, into ``reports`` (beside the utilization report): the cause of
    a failed run outlives ``down``. Returns where they went (None: nothing failed, or no logs)."""
    try:
        phases = state.load().get("phases", {}) if state.exists() else {}
    except StateError:
        phases = {}
    failed = [name for name, phase in phases.items() if phase.get("status") in ("failed", "interrupted")]
    if not failed or not state.logs_dir.is_dir():
        return None
    target = reports / "logs"
    with writing("the failed run's logs", target):
        shutil.copytree(state.logs_dir, target, symlinks=True, dirs_exist_ok=True)
    return str(target)
