"""slurm_build_lock: one Slurm build per build key at a time on the control host, across playbook runs.

Two runs that share the control host's cache (two clusters configured at once, the bake and an unbaked
cluster in CI) would otherwise both build the same Slurm, minutes of every core each. The role takes this
lock before it builds a key and releases it after the result is in the cache; a run that finds the lock
taken waits, and when the holder has put the build in the cache (``done`` appears) it builds nothing.

An action plugin: it runs on the control host whatever host the task is for, in Ansible's worker process,
whose parent is the ansible-playbook process; that pid, with this host's boot id, names the holder. A lock
whose holder is gone (its process ended, or the machine rebooted) is taken over, so an interrupted run
never blocks the next one. Arguments: ``path`` (the lock file), ``done`` (the file whose presence means
the build is cached), ``state`` (``acquired`` or ``released``), ``timeout`` (seconds to wait).
Returns ``done`` (the build is cached: nothing to build) and ``waited`` (seconds).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_POLL_SECONDS = 5.0


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _holder() -> dict[str, Any]:
    """This run: the ansible-playbook process (the worker's parent) on this machine since its boot."""
    return {"pid": os.getppid(), "host": socket.gethostname(), "boot": _boot_id(), "since": time.time()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written, or damaged: judged by its age below
    return data if isinstance(data, dict) else {}


def _stale(owner: dict[str, Any], path: Path, me: dict[str, Any]) -> bool:
    """Whether the lock's holder is gone: same machine and boot, its process ended; or another boot."""
    if not owner:  # unreadable: stale once it is older than a write takes
        try:
            return time.time() - path.stat().st_mtime > 60
        except FileNotFoundError:
            return True
    if owner.get("host") != me["host"]:
        return False  # a cache shared between machines: only its holder or the timeout ends it
    if owner.get("boot") != me["boot"]:
        return True
    return not _alive(int(owner.get("pid", 0)))


def acquire(path: Path, done: Path, timeout: float) -> dict[str, Any]:
    """Take the lock, or see the build appear in the cache while waiting for it."""
    me = _holder()
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    while True:
        waited = round(time.monotonic() - start, 1)
        if done.exists():
            return {"done": True, "acquired": False, "waited": waited}
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _read(path)
            if owner is not None and owner.get("pid") == me["pid"] and owner.get("host") == me["host"]:
                return {"done": False, "acquired": True, "waited": waited}  # this run holds it already
            if owner is not None and _stale(owner, path, me):
                path.unlink(missing_ok=True)
                continue
            if waited > timeout:
                raise AnsibleActionFail(
                    f"waited {waited:.0f} s for the Slurm build lock {path}, held by {owner} (another "
                    "gpufleet or ansible-playbook run building the same Slurm). If no such run is left, "
                    f"remove {path} and run again; slurm_build_lock_timeout sets the wait"
                ) from None
            time.sleep(_POLL_SECONDS)
            continue
        with os.fdopen(descriptor, "w") as handle:
            json.dump(me, handle)
        # The holder may have finished between our look at ``done`` and our lock.
        return {"done": done.exists(), "acquired": True, "waited": waited}


def release(path: Path) -> dict[str, Any]:
    """Drop the lock if this run holds it."""
    owner = _read(path)
    me = _holder()
    if owner is not None and owner.get("pid") == me["pid"] and owner.get("host") == me["host"]:
        path.unlink(missing_ok=True)
        return {"released": True}
    return {"released": False}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "done", "state", "timeout"))

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        state = args.get("state", "acquired")
        path = Path(str(args["path"]))
        if state == "acquired":
            result.update(acquire(path, Path(str(args["done"])), float(args.get("timeout", 3600))))
        elif state == "released":
            result.update(release(path))
        else:
            raise AnsibleActionFail(f"slurm_build_lock: state must be acquired or released, not {state!r}")
        result["changed"] = False
        return result
