"""Record in the cluster's state where a phase (up, configure, validate) is: running, done, failed or
interrupted, so that after a crash or a Ctrl-C ``gpufleet status`` says where things stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpufleet.errors import Interrupted
from gpufleet.state import ClusterState


@contextmanager
def tracked(state: ClusterState, phase: str) -> Iterator[None]:
    """Mark ``phase`` running, then failed or interrupted if the block raises. The block marks its own
    success (with its details) before it ends."""
    if state.exists():
        state.mark(phase, "running")
    try:
        yield
    except Interrupted as exc:
        if state.exists():
            state.mark(phase, "interrupted", signal=exc.signal)
        raise
    except BaseException as exc:
        if state.exists():
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            state.mark(phase, "failed", error=first)
        raise
