"""The one exception hierarchy of gpufleet, and the exit code each maps to.

The CLI boundary (``gpufleet.cli``) turns these into a message and an exit code; nothing else calls
``sys.exit``. Every error carries a message written for the user: what is wrong, where, how to fix it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """Documented exit codes of the ``gpufleet`` command (see README.md, "Using it")."""

    OK = 0
    FAILED = 1  # the command ran and its verdict is negative (check found errors, validation failed)
    USAGE = 2  # bad command line (Typer/Click's own code)
    SPEC = 3  # the spec file is missing, unreadable or invalid
    PROVISION = 4  # bringing up or tearing down infrastructure failed
    CONFIGURE = 5  # the Ansible run failed
    VALIDATE = 6  # the validation run could not be carried out (not the same as a failed gate)
    STATE = 7  # no such cluster, its state folder is inconsistent, or the spec differs from the cluster's
    ENVIRONMENT = 8  # a host prerequisite is missing (podman, debootstrap, root, ...)
    LEFTOVERS = 9  # teardown finished but something tagged for the cluster is still there
    BUSY = 10  # another gpufleet command holds the cluster's lock
    INTERNAL = 70  # a bug in gpufleet (EX_SOFTWARE): never 1, which is a verdict
    SIGINT = 130  # stopped by SIGINT (Ctrl-C): 128 + the signal's number, as shells report it
    SIGTERM = 143  # stopped by SIGTERM


class GpufleetError(Exception):
    """Base of every error a user can meet. ``hint`` is the 'to fix' line."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\nTo fix: {self.hint}"
        return self.message


class SpecError(GpufleetError):
    """The spec file cannot be read or does not validate."""

    exit_code = ExitCode.SPEC


class ProvisionError(GpufleetError):
    exit_code = ExitCode.PROVISION


class ConfigureError(GpufleetError):
    exit_code = ExitCode.CONFIGURE


class ValidationRunError(GpufleetError):
    """The validation suite could not run (as opposed to: it ran and the gate failed)."""

    exit_code = ExitCode.VALIDATE


class LogParseError(GpufleetError):
    """An nccl-tests log could not be read. The message says which file, which line and why."""

    exit_code = ExitCode.VALIDATE


class StateError(GpufleetError):
    exit_code = ExitCode.STATE


class SpecDrift(StateError):
    """The spec differs from the one the cluster was made from, where the command cannot apply it."""


class EnvironmentProblem(GpufleetError):
    """A host prerequisite is missing."""

    exit_code = ExitCode.ENVIRONMENT


class LeftoversError(GpufleetError):
    exit_code = ExitCode.LEFTOVERS


class ClusterBusy(GpufleetError):
    """Another gpufleet command is working on the same cluster (its lock is held)."""

    exit_code = ExitCode.BUSY


class Interrupted(GpufleetError):
    """The command was stopped by a signal; ``signal`` is its name (SIGINT, SIGTERM, SIGHUP)."""

    def __init__(self, signal: str) -> None:
        super().__init__(
            f"stopped by {signal}; what was done so far is kept and recorded in the cluster's state",
            hint="run the same command again to go on, or 'gpufleet down SPEC' to remove everything",
        )
        self.signal = signal
        self.exit_code = ExitCode.SIGINT if signal == "SIGINT" else ExitCode.SIGTERM


# ---- the environment's refusals: a full disk, no permission, too many files, a read-only filesystem ------

# errno -> (what the system said, what to do). Each is the machine's state, not a bug in gpufleet: the
# message names the path and what was being written, the exit code is ENVIRONMENT (8).
_REFUSALS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: (
        "no space left on the device",
        "free space on the filesystem that holds it (df -h {folder}), or point gpufleet elsewhere "
        "(GPUFLEET_STATE_DIR for the state, --out for reports), then run the same command again",
    ),
    errno.EDQUOT: (
        "the disk quota is exceeded",
        "free space within your quota (quota -s), or point gpufleet elsewhere (GPUFLEET_STATE_DIR, --out), "
        "then run the same command again",
    ),
    errno.EACCES: (
        "permission denied",
        "give your user write access to {folder} (ls -ld {folder}), or point gpufleet elsewhere "
        "(GPUFLEET_STATE_DIR, --out)",
    ),
    errno.EPERM: (
        "the operation is not permitted",
        "check the owner and attributes of {folder} (ls -ld {folder}; lsattr -d {folder})",
    ),
    errno.EROFS: (
        "the filesystem is read-only",
        "remount it read-write (mount -o remount,rw), or point gpufleet at a writable place "
        "(GPUFLEET_STATE_DIR, --out)",
    ),
    errno.EMFILE: (
        "this process has too many open files",
        "raise the limit of open files (ulimit -n 4096 in this shell) and run the same command again",
    ),
    errno.ENFILE: (
        "the system has too many open files",
        "close programs that hold many files, or raise fs.file-max (sysctl fs.file-max), then run again",
    ),
}


def environment_problem(
    exc: OSError, what: str | None = None, where: str | os.PathLike[str] | None = None
) -> EnvironmentProblem | None:
    """``exc`` as the clear error it is when the environment refused (``_REFUSALS``), naming ``what`` was
    being written and the path (the error's own; else ``where``, the file or folder being written: a failed
    write(2), unlike open(2), names no file); None for any other ``OSError`` (which stays what it is)."""
    refusal = _REFUSALS.get(exc.errno or 0)
    if refusal is None:
        return None
    said, todo = refusal
    path = exc.filename if isinstance(exc.filename, str) else os.fspath(where) if where is not None else None
    if path is None:
        target = what or "a file (the system did not say which)"
        folder = "."
    else:
        target = f"{what} at {path}" if what else path
        folder = path if where is not None and Path(path).is_dir() else str(Path(path).parent)
    return EnvironmentProblem(f"cannot write {target}: {said}", hint=todo.format(folder=folder))


@contextmanager
def writing(what: str, where: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Turn the environment's refusal of a write inside the block into ``EnvironmentProblem`` naming
    ``what`` (e.g. "the cluster's state record") and the path (``where``: the file or folder being
    written, for errors that name none); other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        problem = environment_problem(exc, what, where)
        if problem is None:
            raise
        raise problem from exc
