"""Record in the cluster's state where a phase (up, configure, validate) is: running, done, failed or
interrupted, so that after a crash or a Ctrl-C ``gpufleet status`` says where things stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from gpufleet.errors import GpufleetError, Interrupted, environment_problem
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
        _mark(state, phase, "interrupted", signal=exc.signal)
        raise
    except BaseException as exc:
        problem = environment_problem(exc) if isinstance(exc, OSError) else None
        said = str(problem or exc)
        _mark(state, phase, "failed", error=said.splitlines()[0] if said else type(exc).__name__)
        raise


def _mark(state: ClusterState, phase: str, status: str, **details: str) -> None:
    """Record how the phase ended; a record that cannot be written (the disk that failed the phase, past
    what ``ClusterState.save`` can rewrite in place) never hides the error that ended it."""
    if not state.exists():
        return
    with suppress(OSError, GpufleetError):
        state.mark(phase, status, **details)
