"""Teardown, alike for every backend: destroy, leftovers, and the state folder only when nothing is left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import LeftoversError
from gpufleet.infra.baremetal.backend import BaremetalBackend
from gpufleet.lifecycle import teardown
from gpufleet.progress import SilentReporter
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]


class Stubborn(BaremetalBackend):
    """A backend whose destroy leaves one thing behind until told otherwise."""

    def __init__(self, left: list[str]) -> None:
        self.left = left
        self.forgotten = False

    def destroy(self, spec, state, reporter):
        return ["vm demo-gpu-0"]

    def leftovers(self, spec, state, reporter):
        return list(self.left)

    def forget(self, spec, state):
        self.forgotten = True
        return ["stack record"]


@pytest.fixture
def spec_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    data = yaml.safe_load((ROOT / "examples" / "baremetal.yaml").read_text())
    data["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_spec(path)
    ClusterState.for_name(spec.name).begin(spec, path)
    return path


def _use(monkeypatch, backend):
    monkeypatch.setattr(teardown, "backend_for", lambda spec: backend)


def test_leftovers_keep_the_record_and_the_state_folder(spec_path, monkeypatch):
    spec = load_spec(spec_path)
    backend = Stubborn(left=["nat gateway nat-0abc"])
    _use(monkeypatch, backend)
    report = teardown.down(spec, ClusterState.for_name(spec.name), SilentReporter())
    assert report.removed == ["vm demo-gpu-0"] and report.leftovers == ["nat gateway nat-0abc"]
    assert not backend.forgotten and ClusterState.for_name(spec.name).exists()
    with pytest.raises(LeftoversError, match="nat-0abc") as failure:
        report.raise_for_leftovers()
    assert failure.value.exit_code == 9


def test_nothing_left_forgets_the_cluster_last(spec_path, monkeypatch):
    spec = load_spec(spec_path)
    backend = Stubborn(left=[])
    _use(monkeypatch, backend)
    report = teardown.down(spec, ClusterState.for_name(spec.name), SilentReporter())
    assert report.removed[:2] == ["vm demo-gpu-0", "stack record"], report.removed
    assert report.removed[2].startswith("state folder ")
    assert backend.forgotten and not ClusterState.for_name(spec.name).exists()


def test_down_prints_the_leftovers_and_exits_9(spec_path, monkeypatch):
    _use(monkeypatch, Stubborn(left=["nat gateway nat-0abc"]))
    result = CliRunner().invoke(app, ["down", str(spec_path), "--json"])
    assert result.exit_code == 9, result.output
    assert json.loads(result.stdout)["leftovers"] == ["nat gateway nat-0abc"]


def test_a_damaged_state_record_does_not_stop_down(spec_path, monkeypatch):
    """A damaged state.json (docs/reliability.md): down still destroys and removes the folder. The
    adopted-stack lookup for the teardown's name read the record and stopped down with exit 7 (CI,
    2026-11-24)."""
    spec = load_spec(spec_path)
    state = ClusterState.for_name(spec.name)
    state.state_file.write_text("{not json")
    backend = Stubborn(left=[])
    _use(monkeypatch, backend)
    report = teardown.down(spec, state, SilentReporter())
    assert report.removed[0] == "vm demo-gpu-0" and report.leftovers == []
    assert report.stack is None and not state.root.exists()


def test_the_logs_of_a_failed_phase_outlive_down(spec_path, monkeypatch, tmp_path):
    """Issue 38: configure's import failure was in an Ansible log that down deleted with the state folder."""
    spec = load_spec(spec_path)
    state = ClusterState.for_name(spec.name)
    events = state.logs_dir / "ansible" / "artifacts" / "job_events"
    events.mkdir(parents=True)
    (events / "9-failed.json").write_text('{"event": "runner_on_failed"}')
    state.mark("configure", "failed", error="site.yml failed")
    _use(monkeypatch, Stubborn(left=[]))
    code = CliRunner().invoke(app, ["down", str(spec_path), "--json"])
    assert code.exit_code == 0, code.output
    kept = json.loads(code.stdout)["logs"]
    assert kept and kept.startswith(str(tmp_path / "state" / "reports" / f"{spec.name}-")), kept
    assert (Path(kept) / "ansible" / "artifacts" / "job_events" / "9-failed.json").exists()
    assert not state.root.exists()


def test_a_clean_life_keeps_no_logs(spec_path, monkeypatch):
    spec = load_spec(spec_path)
    state = ClusterState.for_name(spec.name)
    (state.logs_dir / "ansible").mkdir(parents=True)
    state.mark("configure", "done")
    _use(monkeypatch, Stubborn(left=[]))
    assert teardown.down(spec, state, SilentReporter()).logs is None
