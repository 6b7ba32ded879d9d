"""Does a cluster exist, was it removed, or was it never made? ``status`` and ``down`` ask first.

A cluster is known by its state folder, and a local one also by the podman objects labelled for it (so
``down`` finds a cluster whose state folder is missing or damaged). ``down`` leaves a one-line note in
``$GPUFLEET_STATE_DIR/.removed/<cluster>`` (outside the cluster's state folder, which it removes), so a
second ``down`` can say "already removed" and exit 0, while a name that never existed exits 7.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufleet.errors import StateError
from gpufleet.infra.backend import backend_for
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState, state_root


def _note(name: str) -> Path:
    return state_root() / ".removed" / name


def record_removed(name: str) -> None:
    path = _note(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(datetime.now(UTC).replace(microsecond=0).isoformat() + "\n", encoding="utf-8")


def removed_at(name: str) -> str | None:
    """When ``down`` last removed cluster ``name`` from this machine, or None."""
    try:
        return _note(name).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def local_objects(spec: ClusterSpec) -> list[str]:
    """What of the cluster this machine holds besides its state folder, as its backend finds it (local:
    the podman containers, networks and volumes labelled for it; the other backends keep nothing else)."""
    return backend_for(spec).found_without_state(spec)


def exists(spec: ClusterSpec, state: ClusterState) -> bool:
    if state.root.exists():
        return True
    return bool(local_objects(spec))


def require_exists(spec: ClusterSpec, state: ClusterState) -> None:
    """``StateError`` (exit 7) unless something of the cluster is on this machine."""
    if exists(spec, state):
        return
    where = f"no state at {state.root}"
    kept = backend_for(spec).kept_without_state.format(name=spec.name)
    if kept:
        where += f" and no {kept}"
    gone = removed_at(spec.name)
    if gone:
        raise StateError(f"cluster '{spec.name}' was removed at {gone} ({where})")
    raise StateError(
        f"no cluster named '{spec.name}' ({spec.provider.kind}) was made from this machine ({where})",
        hint="check the spec's name, or set GPUFLEET_STATE_DIR to where the cluster was made",
    )
