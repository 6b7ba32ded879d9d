"""Teardown, the one sequence of every destroy: export the durable copy or refuse, destroy, prove that
nothing is left, and only then forget the cluster.

``run`` is that sequence; every way gpufleet destroys a cluster goes through it (``tests/lifecycle/
test_teardown_paths.py`` holds each to it): ``gpufleet down`` and the reaper's local clusters (``down``: a
cluster this machine's state records, gpufleet up's or adopted), ``gpufleet reap --destroy-stacks`` and
``gpufleet down --stack`` (``ProjectStackTarget``: a project's stack that no state here records, as the
shipped CI workflows destroy theirs). What differs is only the ``Target``: what destroys, what is asked
for leftovers, what is forgotten.

1. A filesystem with a durable copy is exported to it (``lifecycle.durable_copy``); when the export fails
   or times out, ``ExportRefused`` (exit 4) and nothing is destroyed.
2. The utilization report of the cluster's life is written out of its Prometheus
   (``gpufleet.monitoring.teardown_report``); when Prometheus cannot be read the report says why, and
   teardown goes on.
3. The target destroys what the cluster made, then is asked what is still there (waiting out the listing
   APIs' lag). When nothing is, it forgets the cluster (the Pulumi stack's record, the state folder last);
   when something is, both stay, so that the same command can be run again.

``Teardown.raise_for_leftovers`` is the one place that turns leftovers into ``LeftoversError`` (exit 9).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.errors import LeftoversError, StateError, writing
from gpufleet.infra.adopted import AdoptedStack, adopted_of
from gpufleet.infra.backend import backend_for
from gpufleet.lifecycle.durable_copy import DurableCopyOptions, before_destroy
from gpufleet.monitoring.teardown_report import reports_dir, save_before_teardown
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.pulumi_stack import PulumiBackend


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


class Target(Protocol):
    """What one teardown destroys: ``destroy`` it, list what is ``leftovers``, and ``forget`` it once
    nothing is left; each returns lines for the report."""

    def destroy(self, reporter: Reporter) -> list[str]: ...

    def leftovers(self, reporter: Reporter) -> list[str]: ...

    def forget(self) -> list[str]: ...


@dataclass(frozen=True)
class StateTarget:
    """A cluster this machine's state records (``gpufleet up``, or ``gpufleet adopt`` of a stack)."""

    spec: ClusterSpec
    state: ClusterState

    def destroy(self, reporter: Reporter) -> list[str]:
        return backend_for(self.spec).destroy(self.spec, self.state, reporter)

    def leftovers(self, reporter: Reporter) -> list[str]:
        return backend_for(self.spec).leftovers(self.spec, self.state, reporter)

    def forget(self) -> list[str]:
        return backend_for(self.spec).forget(self.spec, self.state) + self.state.remove()


@dataclass(frozen=True)
class ProjectStackTarget:
    """A project's stack (``stacks/``, CI) that no state here records: ``pulumi destroy`` through the
    project, the leftover check of the cluster whose id the stack held (``cluster_id``, read from its
    outputs before the destroy; None: every cluster of the name), and the stack stays, emptied
    (``pulumi stack rm`` would delete the project's ``Pulumi.<stack>.yaml``)."""

    spec: ClusterSpec
    stack: AdoptedStack
    cloud: PulumiBackend
    cluster_id: str | None

    def destroy(self, reporter: Reporter) -> list[str]:
        return self.cloud.destroy_project_stack(self.spec, self.stack, reporter)

    def leftovers(self, reporter: Reporter) -> list[str]:
        return self.cloud.settled_leftovers(self.spec, self.cluster_id, reporter)

    def forget(self) -> list[str]:
        return [f"{self.stack} kept, empty: it belongs to its project ('pulumi stack rm' removes it)"]


def run(
    spec: ClusterSpec,
    target: Target,
    reporter: Reporter,
    durable: DurableCopyOptions | None = None,
    *,
    state: ClusterState | None = None,
    stack: str | None = None,
) -> Teardown:
    """The sequence (see the module doc): export or refuse, report, destroy, leftovers, forget.
    ``state``: the cluster's state folder, whose inventory the utilization report reads (a project stack
    has none here: the report says so); ``stack``: the Pulumi stack's name for the report."""
    durable_copy = before_destroy(spec, reporter, durable or DurableCopyOptions())
    report = Teardown(cluster=spec.name, stack=stack)
    report.durable_copy = durable_copy
    report.utilization = save_before_teardown(state or ClusterState.for_name(spec.name), reporter)
    report.removed.extend(target.destroy(reporter))
    report.leftovers = target.leftovers(reporter)
    if not report.leftovers:
        if state is not None:  # the logs of a failed phase outlive the state folder that forget removes
            beside = Path(str(report.utilization.get("dir") or reports_dir(spec.name)))
            report.logs = keep_failed_logs(state, beside)
            if report.logs:
                reporter.info(f"the logs of the failed phase(s) are kept in {report.logs}")
        report.removed.extend(target.forget())
    return report


def down(
    spec: ClusterSpec,
    state: ClusterState,
    reporter: Reporter,
    durable: DurableCopyOptions | None = None,
) -> Teardown:
    """``run`` on the cluster this machine's state records: export the filesystem to its durable copy (or
    refuse), then destroy the cluster's resources; report what was removed and what is still there."""
    try:
        adopted = adopted_of(state)
    except StateError:  # a damaged record: down still removes the cluster (found by its labels or stack)
        adopted = None
    return run(
        spec,
        StateTarget(spec, state),
        reporter,
        durable,
        state=state,
        stack=adopted.stack if adopted else None,
    )


def down_project_stack(
    spec: ClusterSpec,
    project: AdoptedStack,
    reporter: Reporter,
    durable: DurableCopyOptions | None = None,
    cluster_id: str | None = None,
) -> Teardown:
    """``run`` on a project's stack that no state here records (``reap --destroy-stacks``, ``down
    --stack``). ``cluster_id``: the id the stack holds (its ``cluster_id`` output), whose leftovers count."""
    from gpufleet.infra.backend import pulumi_backend_of

    target = ProjectStackTarget(spec, project, pulumi_backend_of(spec.provider.kind), cluster_id)
    return run(spec, target, reporter, durable, stack=project.stack)


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
