"""The environment's refusals are clear errors, not bugs (issue 38, point 2): a full disk, no permission, too
many open files, a read-only filesystem name the path and what was being written, say what to do, and exit 8
(ENVIRONMENT), never 70 ("a bug in gpufleet"); a phase that failed on a full disk is recorded as failed.

A full disk is the kernel's own: ``/dev/full`` answers every write with ENOSPC, and a symlink to it stands
where gpufleet writes."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import EnvironmentProblem, ExitCode, environment_problem, writing
from gpufleet.lifecycle.phases import tracked
from gpufleet.spec.load import load_spec
from gpufleet.state import ClusterState
from gpufleet.validate.report import require_room

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "validate" / "data" / "mpi-perf-all_gather-4rank-tagged.log"
FULL = Path("/dev/full")

pytestmark = pytest.mark.skipif(not FULL.is_char_device(), reason="no /dev/full on this machine")


def test_a_report_on_a_full_disk_names_the_path_and_exits_8(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "validation-report.json").symlink_to(FULL)
    result = CliRunner().invoke(
        app, ["report", str(LOG), "--out", str(out), "--json"], env={"COLUMNS": "2000"}
    )
    assert result.exit_code == ExitCode.ENVIRONMENT, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "environment", error
    assert error["message"] == (
        f"cannot write the validation report at {out}/validation-report.json: no space left on the device"
    )
    assert f"df -h {out}" in error["hint"]
    assert "bug" not in result.output


def test_a_phase_that_failed_on_a_full_disk_is_recorded_failed_not_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills during the phase: the record can no longer be written the usual way (a new file renamed
    over the old one), and is rewritten in the blocks it holds."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(ROOT / "examples" / "local.yaml")
    state = ClusterState.for_name(spec.name)
    state.begin(spec, None)
    with pytest.raises(EnvironmentProblem) as failed, tracked(state, "validate"):
        assert state.load()["phases"]["validate"]["status"] == "running"
        state.state_file.with_suffix(".tmp").symlink_to(FULL)  # from here on, no new file can be written
        with writing("the validation report", tmp_path / "report.json"):
            (tmp_path / "report.json").symlink_to(FULL)
            (tmp_path / "report.json").write_text("{}")
    assert "cannot write the validation report at" in failed.value.message
    phase = state.load()["phases"]["validate"]
    assert phase["status"] == "failed", phase
    assert (
        phase["error"].startswith("cannot write the validation report at ")
        and "no space left" in (phase["error"])
    )


@pytest.mark.parametrize(
    ("code", "said", "todo"),
    [
        (errno.ENOSPC, "no space left on the device", "df -h /srv/reports"),
        (errno.EDQUOT, "the disk quota is exceeded", "quota -s"),
        (errno.EACCES, "permission denied", "ls -ld /srv/reports"),
        (errno.EROFS, "the filesystem is read-only", "mount -o remount,rw"),
        (errno.EMFILE, "this process has too many open files", "ulimit -n 4096"),
        (errno.ENFILE, "the system has too many open files", "fs.file-max"),
    ],
)
def test_each_refusal_names_the_path_what_and_the_fix(code: int, said: str, todo: str) -> None:
    problem = environment_problem(OSError(code, os.strerror(code), "/srv/reports/x.json"), "the report")
    assert problem is not None and problem.exit_code == ExitCode.ENVIRONMENT
    assert problem.message == f"cannot write the report at /srv/reports/x.json: {said}"
    assert problem.hint is not None and todo in problem.hint


def test_other_os_errors_stay_what_they_are() -> None:
    assert environment_problem(OSError(errno.ENOENT, "No such file", "/x")) is None
    with pytest.raises(FileNotFoundError), writing("anything"):
        raise FileNotFoundError(errno.ENOENT, "No such file", "/x")


def test_validate_refuses_a_report_folder_without_room_before_it_runs(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as refused:
        require_room(tmp_path / "not" / "yet" / "made", needed=1 << 60)
    assert f"the validation report and logs go to {tmp_path}/not/yet/made" in refused.value.message
    assert f"({tmp_path})" in refused.value.message
    assert "a run needs about 1024 PiB there" in refused.value.message
    require_room(tmp_path / "fine", needed=1)
