"""The one exception hierarchy of gpufleet, and the exit code each maps to.

The CLI boundary (``gpufleet.cli``) turns these into a message and an exit code; nothing else calls
``sys.exit``. Every error carries a message written for the user: what is wrong, where, how to fix it.
"""

from __future__ import annotations

from enum import IntEnum


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
