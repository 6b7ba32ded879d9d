"""Session-wide rules: a test file that collects nothing is an error (a typo in a test's name, or a module
that fails to define tests, must not pass silently); each test starts with a blocking stdin; and under
pytest-xdist's ``--dist loadgroup`` (``scripts/bootstrap.sh test`` runs ``-n 2``) the cluster tests run as
two streams, one per worker, beside the rest."""

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


# The two streams of cluster tests. Each is one xdist group, so one worker runs it in file order (a module's
# shared cluster and its fixtures stay on one worker). "cluster-slurm" boots the session's baked image and
# holds the timing-sensitive checks (the slowed node, the monitoring alerts, the killed training node);
# "cluster-gpu" builds and installs (nccl-tests with nvcc, the GPU roles on twins), CPU-bound and not timed.
# The slurm stream goes first in the queue, the rest of the suite next and the GPU stream last: one worker
# takes the slurm stream, the other the fast tests and then the GPU stream (about 30 and 29 minutes of
# work, measured in docs/benchmarks.md, "CI time").
GPU_STREAM_MODULES = frozenset({"test_gpu_stack.py", "test_gpu_twins.py", "test_gpu_roles_converge.py"})


def _stream(item: pytest.Item) -> str | None:
    if item.get_closest_marker("cluster") is None:
        return None
    return "cluster-gpu" if item.path.name in GPU_STREAM_MODULES else "cluster-slurm"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    for item in items:
        stream = _stream(item)
        if stream is not None:
            item.add_marker(pytest.mark.xdist_group(stream))
    order = {"cluster-slurm": 0, None: 1, "cluster-gpu": 2}
    items.sort(key=lambda item: order[_stream(item)])  # stable: file order within each part


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
