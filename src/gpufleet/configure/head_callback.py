"""ansible-runner's own event callback (``awx_display``), for ``ansible-playbook`` on the head node.

``gpufleet configure`` from here reads a play through ansible-runner: its ``awx_display`` stdout callback
turns every task result into a job event, and ``runner.PlayEvents`` reads the events. On the head
(``gpufleet.configure.relay``) the same callback runs, shipped from this machine's ansible-runner (one file,
``runner_callback/awx_display.py`` beside this one's folder, which imports nothing but Ansible): this
plugin only changes where an event goes. ansible-runner has the callback write each event to a file in
its artifacts folder (its ``cache``); here each event the relay reads is printed as one line,
``GPUFLEET_EVENT {json}``, in the output streamed back over SSH, cut to the keys ``PlayEvents``
reads (the rest stays in the head's text output). So the head's play becomes a
``PlayResult`` through the same parser and the same stats as a play run from here.

This file is shipped as ``callback_plugins/gpufleet_events.py`` and selected with
``ANSIBLE_STDOUT_CALLBACK=gpufleet_events``; gpufleet itself never imports it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

DOCUMENTATION = """
    name: gpufleet_events
    short_description: ansible-runner's job events, one line each, for gpufleet's head relay
    description:
      - ansible-runner's awx_display callback, its events printed inline (GPUFLEET_EVENT lines)
    type: stdout
    extends_documentation_fragment:
      - default_callback
"""

MARK = "GPUFLEET_EVENT "
# The events runner.PlayEvents reads, and the run's stats; the rest (verbose lines, task starts of
# handlers, item results) stay in the text output.
EVENTS = frozenset(
    {
        "playbook_on_play_start",
        "playbook_on_task_start",
        "runner_on_ok",
        "runner_on_failed",
        "runner_on_unreachable",
        "playbook_on_stats",
    }
)
# What of an event PlayEvents reads: the play, task and host, the result's changed flag and why it failed,
# whether the failure was ignored, and the stats' counts per host.
DATA_KEYS = ("play", "task", "host", "res", "ignore_errors")
STATS_KEYS = ("changed", "dark", "failures", "ignored", "ok", "processed", "rescued", "skipped")
RESULT_KEYS = ("changed", "msg", "stderr", "module_stderr", "_ansible_no_log", "censored")


def _awx_display() -> ModuleType:
    """ansible-runner's callback module, from ``runner_callback/`` beside this plugin's folder (not a
    callback folder: Ansible must not load it a second time as a plugin of its own)."""
    path = Path(__file__).resolve().parents[1] / "runner_callback" / "awx_display.py"
    spec = importlib.util.spec_from_file_location("gpufleet_awx_display", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_awx = _awx_display()


class _Inline:
    """Where ``awx_display`` hands an event's data (ansible-runner: a file per event): one stdout line."""

    def set(self, key: str, value: dict[str, Any]) -> None:
        if value.get("event") not in EVENTS:
            return
        data = value.get("event_data") or {}
        kept = STATS_KEYS if value["event"] == "playbook_on_stats" else DATA_KEYS
        data = {name: data[name] for name in kept if name in data}
        result = data.get("res")
        if isinstance(result, dict):
            data["res"] = {name: result[name] for name in RESULT_KEYS if result.get(name)}
        event = {"event": value["event"], "event_data": data}
        line = json.dumps(event, cls=_awx.AnsibleJSONEncoderLocal, separators=(",", ":"))
        sys.stdout.write(f"{MARK}{line}\n")
        sys.stdout.flush()


def _no_marker(*args: Any, **kwargs: Any) -> None:
    """``awx_display`` also marks each event's uuid in the text, for ansible-runner to fetch its file:
    nothing to fetch here, so no marker (a few hundred bytes per host and task over SSH)."""


_awx.event_context.cache = _Inline()
_awx.event_context.dump = _no_marker


class CallbackModule(_awx.CallbackModule):  # type: ignore[name-defined]
    CALLBACK_NAME = "gpufleet_events"
