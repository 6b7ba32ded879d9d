"""gpufleet util where no Prometheus engine answers: the scrape interval it reads, the step it asks for,
what it says when Prometheus cannot be reached; and, through the fake Prometheus
(tests/monitoring/fake_prometheus.py), the windows' arithmetic under Prometheus 3.x's left-open ranges,
which no engine here runs (Debian 12 ships 2.42). The fake answers util's own query strings, so these
tests check the windows, never the PromQL: everything a real engine can answer is in
test_utilization_engine.py, against Prometheus itself."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from tests.monitoring.fake_prometheus import Answers, fake_prometheus
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.inventory.model import FabricKind, Host, Inventory, Role
from gpufleet.monitoring import utilization
from gpufleet.monitoring.prometheus import PrometheusClient, PrometheusUnavailable, step_for
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_790_000_000.0
HOUR = 3600.0


def inventory(instance_type: str = "p5.48xlarge", monitoring: bool = True) -> Inventory:
    def host(name: str, roles: list[Role], gpus: int) -> Host:
        return Host(
            name=name,
            roles=roles,
            address=f"10.0.0.{len(name)}",
            private_ip="10.0.0.9",
            instance_type=instance_type if gpus else "m7i.2xlarge",
            gpus=gpus,
            cpus=8,
            memory_mb=8000,
        )

    return Inventory(
        cluster="demo",
        provider="aws",
        fabric=FabricKind.ETHERNET,
        hosts=[
            host("ctl", [Role.CONTROLLER, Role.LOGIN], 0),
            host("n1", [Role.COMPUTE], 8),
            host("n2", [Role.COMPUTE], 8),
        ],
        software={"monitoring": monitoring},
    )


def const(value: float, until: float | None = None):
    return lambda t: value if until is None or t < until else None


def test_step_keeps_under_prometheus_point_limit() -> None:
    assert step_for(0, 3600) == 15
    week = 7 * 24 * HOUR
    assert week / step_for(0, week) < 11_000


def test_unreachable_prometheus_is_clear() -> None:
    with pytest.raises(PrometheusUnavailable, match="cannot be reached") as failure:
        PrometheusClient("http://127.0.0.1:1", timeout=2).query("up")
    assert failure.value.exit_code == 6 and failure.value.hint


def begin_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ClusterState]:
    """A cluster 'demo' (examples/local.yaml renamed) with a state folder, under a private state root."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["name"] = "demo"
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    state = ClusterState.for_name(load_spec(path).name)
    state.begin(load_spec(path), path)
    return path, state


@pytest.fixture
def local_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path, state = begin_demo(tmp_path, monkeypatch)
    inventory().write(state.inventory_file)
    return path


def test_cli_util_unreachable_prometheus_exits_6_with_the_cause(
    local_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", "http://127.0.0.1:1")
    result = CliRunner().invoke(app, ["util", str(local_state), "--json"])
    assert result.exit_code == 6, result.output
    error = json.loads(result.stdout)["error"]
    assert "cannot be reached" in error["message"] and error["hint"]


def test_validation_report_says_why_there_is_no_utilization(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.validate.report import append_section, write_report

    files = write_report(tmp_path, [], [])
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", "http://127.0.0.1:1")
    append_section(files, "utilization", utilization.during(inventory(), T0, T0 + HOUR))
    assert json.loads(files.json.read_text())["utilization"]["available"] is False
    assert "Not available: Prometheus at http://127.0.0.1:1 cannot be reached" in files.markdown.read_text()


# ---- every scrape counts (sum_over_time subqueries at the scrape interval) ------------------------------


def scraped(begin: float, end: float, value: float = 1.0, interval: float = 15.0, phase: float = 7.0):
    """What Prometheus's instant evaluation at t returns for a series a target exported from ``begin`` to
    ``end``, scraped every ``interval`` s at ``phase`` + k x interval: the newest scrape at or before t
    when that scrape held the series; none before the first scrape that held it, and none after the first
    that did not (it marked the series stale: docs/querying/basics.md, "Staleness")."""

    def at(t: float) -> float | None:
        newest = phase + math.floor((t - phase) / interval) * interval
        return value if begin <= newest < end else None

    return at


def scrapes_holding(begin: float, end: float, interval: float = 15.0, phase: float = 7.0) -> int:
    """How many scrapes saw a series exported from ``begin`` to ``end`` (what Prometheus recorded)."""
    return sum(
        1
        for k in range(math.floor((begin - phase) / interval), math.ceil((end - phase) / interval) + 1)
        if begin <= phase + k * interval < end
    )


def short_jobs(starts: list[float], seconds: float, interval: float = 15.0) -> Answers:
    """One busy GPU per job, each job ``seconds`` long, from each of ``starts``."""
    alloc, used = [], []
    for i, begin in enumerate(starts):
        labels = {"jobid": str(100 + i), "node": "n1", "gpu": "0"}
        alloc.append((labels, scraped(begin, begin + seconds, 1.0, interval)))
        used.append((labels, scraped(begin, begin + seconds, 1.0, interval)))
    return {
        utilization.ALLOCATED: alloc,
        utilization.USED: used,
        utilization.CAPACITY: [({"node": "n1"}, const(8))],
        utilization.SIMULATED: [],
    }


def test_jobs_shorter_than_a_step_get_their_gpu_hours_under_prometheus_3() -> None:
    """Prometheus 3.x's left-open ranges (the engine test has 2.x's). A week's window: a
    step of 60 s (55 s from step_for, up to a multiple of the 15 s scrape). Jobs busy for 20 s each are seen
    by one or two scrapes; one sample per step (the code before) missed most of them. Their GPU-hours are what
    Prometheus recorded: the scrapes that saw them x 15 s."""
    week = 7 * 24 * HOUR
    starts = [T0 + day * 24 * HOUR + 1000 + 11 * day for day in range(7)]
    with fake_prometheus(short_jobs(starts, 20), left_open=True) as (url, seen):
        report = utilization.collect(PrometheusClient(url), inventory(), T0, T0 + week)
    for i, begin in enumerate(starts):
        recorded = scrapes_holding(begin, begin + 20) * 15 / HOUR
        assert recorded > 0
        job = report.jobs.get(str(100 + i))
        assert job is not None, f"job {100 + i} (20 s from {begin - T0:.0f} s) missing from util"
        assert job.allocated_gpu_hours == pytest.approx(recorded)
        assert job.used_gpu_hours == pytest.approx(recorded) and job.busy_ratio == pytest.approx(1.0)
        assert abs(job.allocated_gpu_hours * HOUR - 20) <= 15  # within one scrape of the truth
    assert report.nodes["n1"].gpu_hours == pytest.approx(8 * week / HOUR)
    assert report.step == 60 and report.resolution == 15
    assert {r["query"] for r in seen} >= {f"sum_over_time(({utilization.ALLOCATED})[60s:15s])"}


@pytest.mark.parametrize(
    ("start", "seconds"),
    [
        (T0, HOUR),
        (T0 + 0.25, 3 * HOUR + 7.5),
        (T0 + 5, 2 * 24 * HOUR + 1),
        (T0 - 5, 40 * 24 * HOUR),
        (T0, 14),
    ],
)
def test_windows_count_every_scrape_once_under_prometheus_3(start: float, seconds: float) -> None:
    """Prometheus 3.x's left-open ranges (the engine test has 2.x's). One GPU allocated
    throughout: exactly the scrape-interval multiples in (start, end] count, each
    once, whatever the window (the head query and the range query's windows neither overlap nor leave a
    gap, with Prometheus 2.x's closed ranges and 3.x's left-open ones), and the range query stays under
    Prometheus's 11,000 points (the fake refuses more, as Prometheus does)."""
    end = start + seconds
    answers = {
        utilization.ALLOCATED: [({"jobid": "1", "node": "n1", "gpu": "0"}, const(1))],
        utilization.USED: [],
        utilization.CAPACITY: [],
        utilization.SIMULATED: [],
    }
    with fake_prometheus(answers, left_open=True) as (url, seen):
        report = utilization.collect(PrometheusClient(url), inventory(), start, end)
    multiples = math.floor(end / 15) - math.floor(start / 15)
    assert report.jobs["1"].allocated_gpu_hours * HOUR == pytest.approx(multiples * 15)
    for r in seen:
        if r["path"] == "/api/v1/query_range":
            assert (float(r["end"]) - float(r["start"])) / float(r["step"]) <= 11_000


def test_scrape_interval_from_the_inventory_or_the_role_default() -> None:
    inv = inventory()
    role_default = yaml.safe_load((ROOT / "roles/monitoring/defaults/main.yml").read_text())
    assert utilization.scrape_interval(inv) == 15 and role_default["monitoring_scrape_interval"] == "15s"
    inv.extra_vars["monitoring_scrape_interval"] = "1m30s"
    assert utilization.scrape_interval(inv) == 90
    inv.extra_vars["monitoring_scrape_interval"] = "15 seconds"
    with pytest.raises(PrometheusUnavailable, match="monitoring_scrape_interval cannot be read") as failure:
        utilization.scrape_interval(inv)
    assert "15s" in (failure.value.hint or "")


def test_an_allocated_node_idle_now_reads_idle_and_util_says_when_the_alert_fires() -> None:
    """Issue 38: a 5-minute average hid an idle node right after busy work, and util did not say the idle
    alert's window or delay. A job busy for 58 minutes of an hour and idle for the last 2: its busy ratio is
    high, the rules' 5-minute average is still above the idle threshold, and util's 'now' reads idle."""
    end = T0 + HOUR
    busy_until = end - 120
    held = {"jobid": "9", "node": "n1", "gpu": "0"}
    answers = {
        utilization.ALLOCATED: [(held, const(1))],
        utilization.USED: [(held, lambda t: 1.0 if t < busy_until else 0.0)],
        utilization.CAPACITY: [({"node": "n1"}, const(8)), ({"node": "n2"}, const(8))],
        utilization.SIMULATED: [],
    }
    with fake_prometheus(answers) as (url, _seen):
        report = utilization.collect(PrometheusClient(url), inventory(), T0, end)
    assert report.jobs["9"].busy_ratio is not None and report.jobs["9"].busy_ratio > 0.9
    assert report.now == {"n1": "idle", "n2": "not allocated"}
    assert report.to_json()["nodes"]["n1"]["now"] == "idle"
    assert report.idle_alert == (
        "alert GpuAllocatedIdle: an allocated GPU whose SM-active, averaged over 5m, stays below 0.05 for "
        "15m; a GPU that was busy is reported about 20m after it went idle (the 'now' column reads the last "
        "scrape)"
    )
