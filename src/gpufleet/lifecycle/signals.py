"""SIGINT and SIGTERM stop a command cleanly: they become an ``Interrupted`` error in the main thread.

Raised where the command is, the error unwinds through the same paths as any failure: a running child
(podman, ansible-playbook, ssh) is killed by ``subprocess.run`` on the way out, the phase in the state
record is marked ``interrupted`` (``gpufleet.lifecycle.phases``), locks are released, and the CLI prints
what happened and exits 130 (SIGINT) or 143 (SIGTERM). ``down`` afterwards removes everything.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from gpufleet.errors import Interrupted

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise(signum: int, frame: FrameType | None) -> None:
    # A second signal while the first one unwinds is ignored: the clean-up must be allowed to finish.
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
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
