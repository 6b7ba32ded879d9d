"""Session-wide rules: a test file that collects nothing is an error (a typo in a test's name, or a module
that fails to define tests, must not pass silently)."""

from __future__ import annotations

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
