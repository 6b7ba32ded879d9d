"""Expire clusters: find the ones past their lifetime and tear them down.

Two sources: the state folders on this machine (every cluster ``gpufleet up`` made here, with the spec it
was made from), and, for AWS, the ``gpufleet:expires-at`` tag on the cloud's resources (clusters made from
CI with ``pulumi up`` have no state folder here; they are reported, and destroyed with ``pulumi destroy``
on the stack that made them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState, state_root


@dataclass
class ReapItem:
    cluster: str
    provider: str
    expires_at: str
    action: str  # "destroyed", "would destroy", "kept (on_expiry: warn)", "failed: ...", "skipped: ..."
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "provider": self.provider,
            "expires_at": self.expires_at,
            "action": self.action,
            "removed": self.removed,
        }


Teardown = Callable[[ClusterSpec, ClusterState], list[str]]


def expired_states(now: datetime | None = None, root: Path | None = None) -> list[tuple[ClusterState, dict]]:
    now = now or datetime.now(UTC)
    root = root or state_root()
    found = []
    for path in sorted(root.glob("*/state.json")) if root.exists() else []:
        state = ClusterState(name=path.parent.name, root=path.parent)
        try:
            record = state.load()
            expires = datetime.fromisoformat(record["expires_at"])
        except (GpufleetError, KeyError, ValueError):
            continue
        if expires <= now:
            found.append((state, record))
    return found


def reap(teardown: Teardown, *, dry_run: bool = False, now: datetime | None = None) -> list[ReapItem]:
    """Tear down every local-state cluster whose lifetime has passed (``dry_run``: only say so)."""
    items = []
    for state, record in expired_states(now):
        item = ReapItem(state.name, record.get("provider", "?"), record["expires_at"], "")
        spec_path = record.get("spec_path")
        try:
            spec = load_spec(Path(spec_path)) if spec_path else None
        except GpufleetError as exc:
            spec = None
            item.action = f"skipped: its spec {spec_path} cannot be read ({exc.message.splitlines()[0]})"
        if spec is None:
            item.action = item.action or "skipped: no spec recorded; run 'gpufleet down SPEC' yourself"
        elif spec.name != state.name:
            item.action = f"skipped: {spec_path} now describes cluster '{spec.name}', not '{state.name}'"
        elif spec.lifetime.on_expiry == "warn":
            item.action = "kept (lifetime.on_expiry: warn)"
        elif dry_run:
            item.action = "would destroy"
        else:
            try:
                item.removed = teardown(spec, state)
                item.action = "destroyed"
            except GpufleetError as exc:
                item.action = f"failed: {exc.message.splitlines()[0]}"
        items.append(item)
    return items
