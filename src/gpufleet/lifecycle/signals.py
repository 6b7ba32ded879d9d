"""SIGINT and SIGTERM stop a command cleanly: they become an ``Interrupted`` error in the main thread.

The handler first sends SIGTERM to this process's children (podman, ssh, ansible-playbook, also those
started from worker threads), then raises where the command is; the error unwinds through the same
paths as any failure: the phase in the state
record is marked ``interrupted`` (``gpufleet.lifecycle.phases``), locks are released, and the CLI prints
what happened and exits 130 (SIGINT) or 143 (SIGTERM). ``down`` afterwards removes everything.

Before the command exits it waits, at most ``GRACE_S`` seconds, for every process that descended from it
when the signal came (ansible-playbook and its forked workers, which lead sessions of their own, ssh,
srun) to end, kills those still there and waits until the kernel has ended them: when the command has
exited, none of its work goes on.

The list of those processes is taken with the tree frozen (SIGSTOP, rescanned once every process shows
stopped, until a scan finds none new; then SIGCONT once the stop signals are sent): otherwise a worker
that ansible-playbook forks while the list is read, and that detaches before ansible-playbook stops, is
on no list and outlives the command.
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
    """Some thread of the process exists and is not (yet) stopped, traced or a zombie: a stop signal is
    acted on by each thread as it next leaves the kernel, so the leader may show stopped before the rest."""
    try:
        tasks = [int(entry.name) for entry in Path(f"/proc/{pid}/task").iterdir()]
    except (OSError, ValueError):
        return False
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        if text[text.rindex(")") + 2 :].split()[0] not in ("T", "t", "Z", "X"):
            return True
    return False


def _alive(pid: int) -> bool:
    found = _stat(pid)
    return found is not None and found[1] != "Z"  # an exited child not yet reaped is a zombie: gone


KILL_WAIT_S = 5.0  # how long a SIGKILLed process gets to be scheduled and die before the command exits


def _wait(pids: list[int], seconds: float, step: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(step)
    return left


def wait_gone(pids: list[int], grace: float) -> list[int]:
    """Wait up to ``grace`` seconds for ``pids`` to end, then SIGKILL those left and wait (at most
    ``KILL_WAIT_S``) until they are gone: SIGKILL acts only when its process next runs, and on a loaded
    machine that can be after ``kill`` returns and after this command would have exited.
    Returns the killed."""
    left = _wait(pids, grace, 0.1)
    _signal_each(left, signal.SIGKILL)
    _wait(left, KILL_WAIT_S, 0.005)
    return left


def _signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue


def freeze_descendants(root: int, bound_s: float = 5.0) -> list[int]:
    """SIGSTOP every process below ``root`` and return them all: the complete list of what must end.

    A scan counts only once every process sent SIGSTOP shows stopped: a process acts on the signal when it
    next leaves the kernel, and until then it may still fork. So the tree is complete when a scan taken
    after all of them stopped finds none new (a stopped process forks no more). ``bound_s`` bounds the
    whole freeze: a handler must never hang on a process that does not stop."""
    frozen: set[int] = set()
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if any(_running_state(pid) for pid in frozen):
            time.sleep(0.001)
            continue
        new = [pid for pid in descendants(root) if pid not in frozen]
        if not new:
            break
        _signal_each(new, signal.SIGSTOP)
        frozen.update(new)
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
