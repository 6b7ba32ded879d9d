"""SIGINT and SIGTERM stop a command cleanly: they become an ``Interrupted`` error in the main thread.

The handler first sends SIGTERM to this process's children (podman, ssh, ansible-playbook, also those
started from worker threads), then raises where the command is; the error unwinds through the same
paths as any failure: the phase in the state
record is marked ``interrupted`` (``gpufleet.lifecycle.phases``), locks are released, and the CLI prints
what happened and exits 130 (SIGINT) or 143 (SIGTERM). ``down`` afterwards removes everything.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from gpufleet.errors import Interrupted

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def child_pids() -> list[int]:
    """This process's direct children (podman, ssh, ansible-playbook), from /proc (Linux)."""
    pids: list[int] = []
    for path in Path("/proc/self/task").glob("*/children"):
        try:
            pids.extend(int(pid) for pid in path.read_text().split())
        except (OSError, ValueError):
            continue
    return sorted(set(pids))


def _raise(signum: int, frame: FrameType | None) -> None:
    # A second signal while the first one unwinds is ignored: the clean-up must be allowed to finish.
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    # Children started from worker threads (ssh in a bisection round) would otherwise run to the end
    # of their timeout while the main thread waits for its threads: stop them now.
    for pid in child_pids():
        try:
            # A child that leads its own process group (ansible-playbook under ansible-runner's pty)
            # takes its group (the forked workers) with it.
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            continue
    raise Interrupted(signal.Signals(signum).name)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``Interrupted`` while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
