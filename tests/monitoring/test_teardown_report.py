"""``down`` still tears down (and proves nothing is left) when Prometheus cannot be read, and says why its
utilization report is missing. The report it writes from a real Prometheus before it destroys anything is
test_utilization_engine.py's ``test_down_writes_the_cluster_lifes_report_before_destroying``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.monitoring.test_utilization import begin_demo, inventory

from gpufleet.infra.baremetal.backend import BaremetalBackend
from gpufleet.lifecycle import teardown
from gpufleet.progress import RecordingReporter
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState, state_root

ROOT = Path(__file__).resolve().parents[2]


class Recording(BaremetalBackend):
    """Notes which utilization reports existed when destroy began; leaves nothing behind."""

    def __init__(self) -> None:
        self.reports_at_destroy: list[Path] = []

    def destroy(self, spec: Any, state: Any, reporter: Any) -> list[str]:
        self.reports_at_destroy = sorted((state_root() / "reports").glob("*/utilization.*"))
        return ["node demo-gpu-0"]

    def leftovers(self, spec: Any, state: Any, reporter: Any) -> list[str]:
        return []

    def forget(self, spec: Any, state: Any) -> list[str]:
        return []


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ClusterState, Recording]:
    path, state = begin_demo(tmp_path, monkeypatch)
    spec = load_spec(path)
    backend = Recording()
    monkeypatch.setattr(teardown, "backend_for", lambda spec: backend)
    return spec, state, backend


def reports() -> Path:
    (found,) = (state_root() / "reports").iterdir()
    return found


def test_unreachable_prometheus_still_tears_down_and_says_so(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, state, _backend = cluster
    inventory().write(state.inventory_file)
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", "http://127.0.0.1:1")
    reporter = RecordingReporter()
    result = teardown.down(spec, state, reporter)
    assert result.removed[0] == "node demo-gpu-0" and not result.leftovers and not state.exists()
    assert result.utilization["available"] is False and "cannot be reached" in result.utilization["reason"]
    assert (
        "Not available: Prometheus at http://127.0.0.1:1 cannot be reached"
        in (reports() / "utilization.md").read_text()
    )
    assert any("utilization report: not available" in line for line in reporter.lines)


def test_monitoring_off_is_said_and_nothing_is_asked(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, state, _backend = cluster
    inventory(monitoring=False).write(state.inventory_file)
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", "http://127.0.0.1:1")
    result = teardown.down(spec, state, RecordingReporter())
    assert (
        result.utilization["reason"] == "monitoring is off for this cluster (spec software.monitoring: false)"
    )
    assert not state.exists()
