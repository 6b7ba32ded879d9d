"""Teardown, the same for every backend: destroy, look for leftovers, and only then forget the cluster.

``down`` asks the backend to destroy what the cluster made, then asks what is still there. When nothing
is, the backend drops its own record (a Pulumi stack) and the state folder goes last; when something is,
both stay, so that ``gpufleet down`` can be run again. ``Teardown.raise_for_leftovers`` is the one place
that turns leftovers into ``LeftoversError`` (exit 9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import LeftoversError
from gpufleet.infra.backend import backend_for
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState


@dataclass
class Teardown:
    cluster: str = ""
    removed: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "leftovers": self.leftovers}

    def raise_for_leftovers(self) -> None:
        if self.leftovers:
            raise LeftoversError(
                f"teardown of cluster '{self.cluster}' finished but these are still there: "
                + ", ".join(self.leftovers),
                hint="run 'gpufleet down' again (the state folder is kept until nothing is left); if they "
                "stay, remove them by hand",
            )


def down(spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> Teardown:
    """Destroy the cluster's resources; report what was removed and what is still there."""
    backend = backend_for(spec)
    report = Teardown(cluster=spec.name)
    report.removed.extend(backend.destroy(spec, state, reporter))
    report.leftovers = backend.leftovers(spec, state, reporter)
    if not report.leftovers:
        report.removed.extend(backend.forget(spec, state))
        report.removed.extend(state.remove())
    return report
