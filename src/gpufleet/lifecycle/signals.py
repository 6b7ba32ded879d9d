"""SIGINT and SIGTERM stop a command cleanly: they become an ``Interrupted`` error in the main thread.

The handler first sends SIGTERM to this process's children (podman, ssh, ansible-playbook, also those
started from worker threads), then raises where the command is; the error unwinds through the same
paths as any failure: the phase in the state
record is marked ``interrupted`` (``gpufleet.lifecycle.phases``), locks are released, and the CLI prints
what happened and exits 130 (SIGINT) or 143 (SIGTERM). ``down`` afterwards removes everything.

Before the command exits it waits, at most ``GRACE_S`` seconds, for every process that descended from it
when the signal came (ansible-playbook and its forked workers, which lead sessions of their own, ssh,
srun) to end, and kills those still there: when the command has exited, none of its work goes on.

The list of those processes is taken with the tree frozen (SIGSTOP, rescanned until no new process shows
up, then SIGCONT once the stop signals are sent): otherwise a worker that ansible-playbook forks while the
list is read, and that detaches before ansible-playbook stops, is on no list and outlives the command.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from gpufleet.errors import Interrupted

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0  # how long the processes stopped by a signal get to end before they are killed
_stopping: list[int] = []  # this process's descendants when the signal came


def child_pids() -> list[int]:
    """This process's direct children (podman, ssh, ansible-playbook), from /proc (Linux)."""
    pids: list[int] = []
    for path in Path("/proc/self/task").glob("*/children"):
        try:
            pids.extend(int(pid) for pid in path.read_text().split())
        except (OSError, ValueError):
            continue
    return sorted(set(pids))


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, from /proc/<pid>/stat; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0]


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` in the process tree (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None and found[1] != "Z":
            parents.setdefault(found[0], []).append(int(entry.name))
    below, todo = [], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        below.extend(children)
        todo.extend(children)
    return sorted(below)


def _running_state(pid: int) -> bool:
    """The process exists and is not (yet) stopped, traced or a zombie."""
    found = _stat(pid)
    return found is not None and found[1] not in ("T", "t", "Z", "X")


def _alive(pid: int) -> bool:
    found = _stat(pid)
    return found is not None and found[1] != "Z"  # an exited child not yet reaped is a zombie: gone


def wait_gone(pids: list[int], grace: float) -> list[int]:
    """Wait up to ``grace`` seconds for ``pids`` to end, then SIGKILL those left; return the killed."""
    deadline = time.monotonic() + grace
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return left


def _signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue


def freeze_descendants(root: int, rounds: int = 100) -> list[int]:
    """SIGSTOP every process below ``root``, rescanning until a scan finds none not yet stopped (a stopped
    process forks no more), and return them all: the complete list of what must end."""
    frozen: set[int] = set()
    for _ in range(rounds):
        new = [pid for pid in descendants(root) if pid not in frozen]
        if not new:
            break
        _signal_each(new, signal.SIGSTOP)
        frozen.update(new)
        # A signal is acted on when its process next leaves the kernel: until each shows stopped, it may
        # still fork, and the next scan must see the result.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(_running_state(pid) for pid in new):
            time.sleep(0.001)
    return sorted(frozen)


def _raise(signum: int, frame: FrameType | None) -> None:
    # A second signal while the first one unwinds is ignored: the clean-up must be allowed to finish.
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _stopping[:] = freeze_descendants(os.getpid())
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
    # The stop signals are pending on the frozen processes: they act on them as soon as they run again.
    _signal_each(_stopping, signal.SIGCONT)
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
    except Interrupted:
        wait_gone(_stopping, GRACE_S)
        _stopping.clear()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
