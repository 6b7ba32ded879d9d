"""Session-wide rules: a test file that collects nothing is an error (a typo in a test's name, or a module
that fails to define tests, must not pass silently); and each test starts with a blocking stdin."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

_collected: dict[Path, int] = {}


def pytest_collectreport(report: pytest.CollectReport) -> None:
    path = Path(str(report.fspath)) if report.fspath else None
    if path is not None and path.name.startswith("test_") and path.suffix == ".py" and report.passed:
        _collected[path.resolve()] = len(report.result)


def pytest_collection_finish(session: pytest.Session) -> None:
    empty = sorted(str(path) for path, count in _collected.items() if count == 0)
    if empty:
        raise pytest.UsageError("these test files collect no test: " + ", ".join(empty))


def _stdin_nonblocking() -> bool:
    try:
        return not os.get_blocking(0)
    except OSError:  # no fd 0
        return False


@pytest.fixture(autouse=True)
def _blocking_stdin(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every process a test starts inherits the session's stdin, one open file for the whole run. A child
    that sets O_NONBLOCK on it and never sets it back (a process killed by a fault test) left it so for every
    later test, and ansible-playbook 2.19 then refuses to start ("Ansible requires blocking IO on
    stdin/stdout/stderr. Non-blocking file handles detected: <stdin>": a full local CI run of 469758c,
    2026-11-25). Each test starts with it blocking; a test that leaves it non-blocking is named in a
    warning, so the process that does it can be found."""
    if _stdin_nonblocking():
        os.set_blocking(0, True)
    yield
    if _stdin_nonblocking():
        os.set_blocking(0, True)
        warnings.warn(f"{request.node.nodeid} left stdin non-blocking", stacklevel=1)
