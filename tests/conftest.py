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


# The two streams of cluster tests, each one scheduling unit that one worker runs in file order (a module's
# shared cluster and its fixtures stay on one worker). "cluster-slurm" bakes the session's image and holds
# the fault acts (the slowed node, the killed training node); "cluster-gpu" builds and installs (nccl-tests
# with nvcc, the GPU roles on twins), then runs the shared local cluster on the baked image.
# xdist hands out the units with the most tests first: the slurm stream to one worker, the GPU stream to the
# other, then each fast test to whichever worker is free (docs/benchmarks.md, "CI time"). Every cluster test
# lives in tests/cluster/ (the cluster mark), so the stream follows from the path alone: the controller,
# which schedules, collects nothing and sees node ids only.
# The shared local cluster's module (test_local_cluster.py) runs last in the GPU stream (file order: after
# test_gpu_*), by when the Slurm stream's bake (the Slurm build in it: about 13 min) has made the image it
# boots: the Slurm stream alone (bake, the baked-image test, the faults) took 47 min with it (2026-11-27).
GPU_STREAM_MODULES = frozenset(
    {"test_gpu_stack.py", "test_gpu_twins.py", "test_gpu_roles_converge.py", "test_local_cluster.py"}
)


def stream_of(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    if not path.startswith("tests/cluster/"):
        return None
    return "cluster-gpu" if path.rsplit("/", 1)[-1] in GPU_STREAM_MODULES else "cluster-slurm"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadgroup``: xdist's scope scheduling with the streams as scopes. (xdist 3.8 groups
    by renaming item._nodeid, which pytest 9.2's items no longer read: its xdist_group marks group
    nothing there.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Streams(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return stream_of(nodeid) or nodeid

    return Streams(config, log)


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


@pytest.fixture(autouse=True)
def _ready_wait_on_a_fake_clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite polls a node that is not ready until validation.ready_timeout (5 minutes by default): off a
    real cluster, its clock is a fake one that each sleep moves on, so the polls run without the wait. The
    late-ready tests (tests/validate/test_gate_tiers.py) read the same clock."""
    if request.node.get_closest_marker("cluster"):
        return
    from gpufleet.validate import suite

    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(suite, "_clock", lambda: now[0])
    monkeypatch.setattr(suite, "_sleep", sleep)
