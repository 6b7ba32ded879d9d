"""The slurm role's build lock on the control host (roles/slurm/action_plugins/slurm_build_lock.py): a second
run that needs the same Slurm build waits for the first and then builds nothing; a lock whose holder is gone
is taken over; a holder that stays is named when the wait ends."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleActionFail

ROOT = Path(__file__).resolve().parents[2]


def load_plugin() -> ModuleType:
    path = ROOT / "roles" / "slurm" / "action_plugins" / "slurm_build_lock.py"
    spec = importlib.util.spec_from_file_location("slurm_build_lock", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lock = load_plugin()


def holder(pid: int, *, host: str | None = None, boot: str | None = None) -> str:
    return json.dumps(
        {
            "pid": pid,
            "host": host or socket.gethostname(),
            "boot": boot or lock._boot_id(),
            "since": time.time(),
        }
    )


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setattr(lock, "_POLL_SECONDS", 0.1)
    return tmp_path / "key.lock", tmp_path / "key" / "build.json"


def test_the_first_run_takes_the_lock_and_releases_it(paths) -> None:
    path, done = paths
    assert lock.acquire(path, done, 10) == {"done": False, "acquired": True, "waited": 0.0}
    assert json.loads(path.read_text())["pid"] == os.getppid()
    assert lock.acquire(path, done, 10)["acquired"], "the holder takes its own lock again"
    assert lock.release(path) == {"released": True} and not path.exists()


def test_a_second_run_waits_for_the_build_and_builds_nothing(paths) -> None:
    path, done = paths
    other = subprocess.Popen(["sleep", "30"])  # the other run's ansible-playbook, alive
    try:
        path.write_text(holder(other.pid))

        def finish() -> None:  # the other run publishes its build, then releases its lock
            time.sleep(1.0)
            done.parent.mkdir()
            done.write_text("{}")
            path.unlink()

        threading.Thread(target=finish).start()
        got = lock.acquire(path, done, 30)
    finally:
        other.kill()
        other.wait()
    assert got["done"] is True and got["acquired"] is False, got
    assert got["waited"] >= 0.9, got


def test_a_lock_whose_run_ended_is_taken_over(paths) -> None:
    path, done = paths
    ended = subprocess.Popen(["true"])
    ended.wait()
    path.write_text(holder(ended.pid))
    assert lock.acquire(path, done, 5)["acquired"]
    path.write_text(holder(os.getpid(), boot="a-boot-before-this-one"))
    assert lock.acquire(path, done, 5)["acquired"]


def test_a_holder_that_stays_is_named_when_the_wait_ends(paths) -> None:
    path, done = paths
    path.write_text(holder(1, host="another-control-host"))
    with pytest.raises(AnsibleActionFail) as failed:
        lock.acquire(path, done, 0.3)
    said = str(failed.value)
    assert "another-control-host" in said and f"remove {path}" in said and "slurm_build_lock_timeout" in said


def test_release_leaves_another_runs_lock(paths) -> None:
    path, _ = paths
    path.write_text(holder(1))
    assert lock.release(path) == {"released": False} and path.exists()
