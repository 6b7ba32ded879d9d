"""``gpufleet up`` on AWS refuses, before anything is created, when this machine lacks the aws CLI or its
Session Manager plugin, which the SSM proxy runs for every SSH connection (AWS audit 2026-11-24 N15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.backend import backend_for
from gpufleet.preflight.aws_tools import missing_ssm_tools, require_ssm_tools
from gpufleet.progress import SilentReporter
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]


def executable(folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (folder / name).chmod(0o755)


@pytest.fixture
def spec():
    return load_spec(ROOT / "examples" / "aws-p5.yaml")


def test_both_tools_found_on_path(tmp_path):
    executable(tmp_path / "bin", "aws")
    executable(tmp_path / "bin", "session-manager-plugin")
    assert missing_ssm_tools(str(tmp_path / "bin")) == []


def test_each_missing_tool_is_named_with_its_install_command(tmp_path):
    executable(tmp_path / "bin", "aws")
    (line,) = missing_ssm_tools(str(tmp_path / "bin"))
    assert "'session-manager-plugin' is not on PATH" in line, line
    assert "session-manager-plugin.deb" in line and "dpkg -i" in line, line
    both = missing_ssm_tools(str(tmp_path / "empty"))
    assert [line.split("'")[1] for line in both] == ["aws", "session-manager-plugin"], both
    assert "awscli-exe-linux-x86_64.zip" in both[0], both[0]


def test_ssm_off_needs_neither(spec, tmp_path):
    no_ssm = spec.provider.model_copy(update={"ssm": False})
    require_ssm_tools(spec.model_copy(update={"provider": no_ssm}), "")
    with pytest.raises(EnvironmentProblem, match="session-manager-plugin"):
        require_ssm_tools(spec, str(tmp_path))


def test_up_refuses_before_anything_is_created(spec, monkeypatch, tmp_path):
    home = tmp_path / "pulumi-home"
    executable(home / "bin", "pulumi")  # the Pulumi CLI is found (PULUMI_HOME/bin), the SSM tools are not
    executable(tmp_path / "bin", "aws")
    monkeypatch.setenv("PULUMI_HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    state = ClusterState.for_name(spec.name)
    with pytest.raises(EnvironmentProblem) as failure:
        backend_for(spec).deploy(spec, state, SilentReporter())
    assert "session-manager-plugin" in failure.value.message, failure.value.message
    assert "nothing was created" in (failure.value.hint or ""), failure.value.hint
    assert failure.value.exit_code == 8
    assert not state.backend_dir("pulumi").exists(), "nothing may be written before the tools are found"
