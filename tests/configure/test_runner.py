"""How a failed play is reported: the nodes that became unreachable are named first, with the way back."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.configure.runner import PlayEvents, play_error
from gpufleet.errors import ConfigureError, ExitCode
from gpufleet.progress import SilentReporter

DATA = Path(__file__).parent / "data"


def _failures(*events: dict) -> list[str]:
    progress = PlayEvents(SilentReporter())
    for event in events:
        progress(event)
    return progress.failures


def test_a_node_killed_mid_play_is_named_with_the_way_back() -> None:
    event = json.loads((DATA / "runner_on_unreachable.json").read_text())  # a real one, see SOURCES.md
    failures = _failures(event)
    assert failures == [
        "flt-kill-compute-1: unreachable: Task failed: Data could not be sent to remote host "
        '"10.89.1.12". Make sure this host can be reached over ssh: ssh: connect to host 10.89.1.12 '
        "port 22: Connection timed out"
    ]
    error = play_error("site.yml", "failed", 4, failures, ["flt-kill-compute-1"], "/state/logs/a1")
    assert isinstance(error, ConfigureError) and error.exit_code == ExitCode.CONFIGURE
    first_line = error.message.splitlines()[0]  # what the state records as the phase's error
    assert first_line == (
        "site.yml failed (status failed, exit 4): flt-kill-compute-1 became unreachable "
        "(stopped, killed or cut off from this machine) while it ran:"
    )
    assert "  - flt-kill-compute-1: unreachable: Task failed" in error.message
    assert error.hint is not None
    assert error.hint.startswith("bring flt-kill-compute-1 back: 'gpufleet up SPEC' starts a stopped node")
    assert "then re-run 'gpufleet configure SPEC'" in error.hint and "/state/logs/a1/stdout" in error.hint


def test_a_task_failure_without_unreachable_nodes_keeps_the_plain_message() -> None:
    failed = {
        "event": "runner_on_failed",
        "event_data": {
            "host": "demo-compute-0",
            "task": "Start slurmd",
            "res": {"msg": "Unable to start service slurmd: Job for slurmd.service failed"},
        },
    }
    error = play_error("site.yml", "failed", 2, _failures(failed), [], "/state/logs/a2")
    assert error.message == (
        "site.yml failed (status failed, exit 2):\n"
        "  - demo-compute-0: Start slurmd: Unable to start service slurmd: Job for slurmd.service failed"
    )
    assert "unreachable" not in error.message and "gpufleet up" not in (error.hint or "")
    assert error.hint == (
        "the full log is in /state/logs/a2/stdout; fix the cause and re-run 'gpufleet configure' "
        "(it is safe to re-run)"
    )


def test_a_failed_command_says_its_own_error_after_ansibles_message() -> None:
    """A command module's failure is "non-zero return code": its stderr says why, and is kept (the head's
    plays and the plays run from here read events through the same PlayEvents)."""
    failed = {
        "event": "runner_on_failed",
        "event_data": {
            "host": "t-compute-1",
            "task": "Munge credential decodes",
            "res": {"msg": "non-zero return code", "stderr": "munge: Error: Invalid credential"},
        },
    }
    assert _failures(failed) == [
        "t-compute-1: Munge credential decodes: non-zero return code: munge: Error: Invalid credential"
    ]
