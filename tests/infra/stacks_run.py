"""Run stacks/__main__.py (what ``pulumi up`` in stacks/ runs) under Pulumi's mocks, and a stand-in for the
``pulumi`` CLI that answers ``pulumi version`` as the real one does (the Automation API asks it first)."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest

from gpufleet.infra.plan import MockCloud, Plan, run_offline

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def run_stack(stack: str, cloud: MockCloud, config: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Plan:
    """The plan of stacks/__main__.py with ``config``; its ``outputs`` are everything the stack exports,
    secrets resolved (as ``pulumi stack output --json --show-secrets`` prints them)."""
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", exported.__setitem__)

    def program() -> dict[str, Any]:
        pulumi.runtime.set_all_config({key: str(value) for key, value in config.items()})
        runpy.run_path(str(STACKS / "__main__.py"), run_name="__main__")
        return exported

    return run_offline(program, cloud, stack=stack)


def fake_pulumi_cli(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``$PULUMI_HOME/bin/pulumi`` on PATH, printing a version for ``pulumi version`` (nothing else runs it:
    the stacks it would drive are faked)."""
    (home / "bin").mkdir(parents=True)
    cli = home / "bin" / "pulumi"
    cli.write_text('#!/bin/sh\n[ "$1" = version ] && echo v3.200.0\n', encoding="utf-8")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PULUMI_HOME", str(home))
