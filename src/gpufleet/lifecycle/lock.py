"""One gpufleet command at a time per cluster: an advisory lock (``flock``) on a file beside the state.

``$GPUFLEET_STATE_DIR/.locks/<cluster>.lock`` lives outside the cluster's state folder, so ``down`` can
remove that folder while holding the lock. The kernel drops the lock when the process ends, however it
ends (a crash, SIGKILL): a stale lock file is harmless. The file records who holds it, for the message
the second command prints. Re-entrant within one process (``run`` calls ``up``, then ``down``).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from gpufleet.errors import ClusterBusy
from gpufleet.state import state_root

_held: dict[str, IO[str]] = {}


def lock_path(name: str) -> Path:
    return state_root() / ".locks" / f"{name}.lock"


def hold_cluster_lock(name: str, command: str, *, wait: float = 0.0) -> None:
    """Take cluster ``name``'s lock for the rest of this command, or raise ``ClusterBusy`` naming the
    holder. ``wait``: seconds to keep trying before giving up."""
    if name in _held:
        return
    path = lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+", encoding="utf-8")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "another gpufleet command"
                handle.close()
                raise ClusterBusy(
                    f"cluster '{name}' is busy: {holder} is working on it; nothing was changed",
                    hint="wait for that command to finish (or stop it), then run this one again",
                ) from None
            time.sleep(0.2)
    handle.seek(0)
    handle.truncate()
    handle.write(f"'gpufleet {command}' (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})\n")
    handle.flush()
    _held[name] = handle


def release_all() -> None:
    """Drop every lock this process holds (the end of a command; the kernel does it at exit anyway)."""
    while _held:
        _, handle = _held.popitem()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
