"""gpufleet util, the validation report's utilization and the report ``down`` writes, read from a real
Prometheus (tests/monitoring/real_prometheus.py) that holds what its scrapes of the real exporters would have
stored: dcgm-exporter's and the Slurm exporter's own label sets, the targets and labels of the monitoring
role's scrape config, staleness when a job ends (tests/monitoring/exporters.py). util's PromQL is evaluated by
Prometheus's own engine: a query that asks the wrong thing gets the wrong numbers here."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.monitoring.exporters import Allocation, GpuCluster, Scrapes, gpu_inventory
from tests.monitoring.real_prometheus import RealPrometheus, real_prometheus
from tests.monitoring.test_utilization import begin_demo
from typer.testing import CliRunner

from gpufleet.catalog import load_catalog
from gpufleet.cli.app import app
from gpufleet.inventory.model import Inventory
from gpufleet.monitoring import utilization
from gpufleet.monitoring.prometheus import PrometheusClient, PrometheusUnavailable

# A multiple of the 15 s scrape interval: the jobs start and end on multiples, so every target's scrape
# (each at its own offset inside the interval) sees the same jobs at each multiple util counts.
T0 = 1_789_999_995.0
HOUR = 3600.0


@pytest.fixture
def prometheus() -> Iterator[RealPrometheus]:
    with real_prometheus() as server:
        yield server


def two_jobs(t0: float, instance_type: str = "p5.48xlarge") -> GpuCluster:
    """n1 and n2 with 8 GPUs each: job 7 holds GPUs 0 (SM-active 0.5) and 1 (idle) of n1 throughout; job 8
    holds GPU 0 of n2, fully busy, until half past."""
    return GpuCluster(
        gpu_inventory(instance_type=instance_type),
        [
            Allocation("7", "n1", (0, 1), t0 - 600, t0 + 2 * HOUR, (0.5, 0.0)),
            Allocation("8", "n2", (0,), t0 - 600, t0 + HOUR / 2, 1.0),
        ],
    )


def loaded(prometheus: RealPrometheus, cluster: GpuCluster, tmp_path: Path, start: float, end: float) -> None:
    """Prometheus has scraped ``cluster`` from 10 minutes before ``start`` to a minute after ``end``."""
    interval = utilization.scrape_interval(cluster.inventory)
    prometheus.write(cluster.stored(tmp_path, start - 600, end + 60, interval))


def price() -> float:
    itype = load_catalog().instance_types["p5.48xlarge"]
    assert itype.price_per_hour_usd
    return itype.price_per_hour_usd / itype.gpu_count


def test_gpu_hours_busy_ratio_and_waste_per_node_and_job(prometheus: RealPrometheus, tmp_path: Path) -> None:
    cluster = two_jobs(T0)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR)
    n1, n2 = report.nodes["n1"], report.nodes["n2"]
    assert (n1.gpu_hours, n1.allocated_gpu_hours, n1.used_gpu_hours) == pytest.approx((8, 2, 0.5))
    assert (n2.gpu_hours, n2.allocated_gpu_hours, n2.used_gpu_hours) == pytest.approx((8, 0.5, 0.5))
    assert n1.busy_ratio == pytest.approx(0.25) and n2.busy_ratio == pytest.approx(1.0)
    # n1: 1.5 allocated-idle GPU-hours + 6 unallocated; n2: 7.5 unallocated
    assert n1.wasted_usd == pytest.approx(7.5 * price()) and n2.wasted_usd == pytest.approx(7.5 * price())
    job7, job8 = report.jobs["7"], report.jobs["8"]
    assert (job7.allocated_gpu_hours, job7.used_gpu_hours, job7.busy_ratio) == pytest.approx((2, 0.5, 0.25))
    assert job7.wasted_usd == pytest.approx(1.5 * price()) and job8.wasted_usd == pytest.approx(0)
    assert set(report.nodes) == {"n1", "n2"} and set(report.jobs) == {"7", "8"}
    assert report.total.busy_ratio == pytest.approx(1.0 / 2.5)
    assert not report.simulated
    document = report.to_json()
    assert document["jobs"]["7"]["busy_ratio"] == 0.25 and document["nodes"]["n2"]["gpu_hours"] == 8


def test_one_job(prometheus: RealPrometheus, tmp_path: Path) -> None:
    cluster = two_jobs(T0)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR, job="7")
    assert set(report.jobs) == {"7"}
    assert report.nodes["n1"].allocated_gpu_hours == pytest.approx(2)
    assert report.nodes["n2"].allocated_gpu_hours == 0
    assert report.nodes["n1"].wasted_usd == pytest.approx(1.5 * price())  # no unallocated share for one job


def test_no_price_no_dollars(prometheus: RealPrometheus, tmp_path: Path) -> None:
    cluster = two_jobs(T0, instance_type="local")
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR)
    assert report.total.allocated_gpu_hours == pytest.approx(2.5)
    assert report.total.wasted_usd is None and report.jobs["7"].wasted_usd is None
    assert "no price in the catalog" in utilization.render_markdown(report)


def test_prometheus_refuses_a_query_it_cannot_parse(prometheus: RealPrometheus) -> None:
    with pytest.raises(PrometheusUnavailable, match=r"refused the query \(400\): .*parse error") as failure:
        PrometheusClient(prometheus.url).query_range("sum(slurm_job_gpu", T0, T0 + 60, 15)
    assert failure.value.exit_code == 6 and failure.value.hint


def test_the_engine_refuses_more_than_11000_points(prometheus: RealPrometheus) -> None:
    """The limit ``prometheus.step_for`` keeps under (web/api/v1/api.go) is the engine's own."""
    with pytest.raises(PrometheusUnavailable, match="11,000 points"):
        PrometheusClient(prometheus.url).query_range("vector(1)", T0, T0 + 11_001 * 15, 15)


def test_report_files(prometheus: RealPrometheus, tmp_path: Path) -> None:
    cluster = two_jobs(T0)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR)
    files = utilization.write_report(tmp_path / "out", report)
    assert [f.name for f in files] == ["utilization.json", "utilization.md", "utilization.png"]
    assert json.loads(files[0].read_text())["total"]["allocated_gpu_hours"] == 2.5
    assert "| 7 | 2.000 | 0.500 | 25.0% |" in files[1].read_text()
    assert files[2].read_bytes()[:4] == b"\x89PNG"


def test_timeline_is_busy_gpus_per_window(prometheus: RealPrometheus, tmp_path: Path) -> None:
    cluster = two_jobs(T0)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR)
    times = [t for t, _ in report.timeline]
    assert times == sorted(times) and times[0] >= T0 - 15 and times[-1] < T0 + HOUR
    busy = dict(report.timeline)
    assert busy[times[0]] == pytest.approx(1.5)  # job 7's GPU at 0.5 and job 8's at 1.0
    assert busy[times[-1]] == pytest.approx(0.5)  # job 8 ended at half past


def test_now_is_each_nodes_state_at_the_windows_end(prometheus: RealPrometheus, tmp_path: Path) -> None:
    """Issue 38: util's 'now' read the last moment any job held GPUs, not the window's end, so with every
    job gone a node still read busy or idle for the rest of the window. Job 7 holds n1 (GPUs at 0.5 and 0)
    until 40 minutes past, job 8 holds n2 busy until half past, job 9 holds n2 idle from 45 to 50 past."""
    cluster = GpuCluster(
        gpu_inventory(),
        [
            Allocation("7", "n1", (0, 1), T0 - 600, T0 + 40 * 60, (0.5, 0.0)),
            Allocation("8", "n2", (0,), T0 - 600, T0 + HOUR / 2, 1.0),
            Allocation("9", "n2", (1,), T0 + 45 * 60, T0 + 50 * 60, 0.0),
        ],
    )
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    client = PrometheusClient(prometheus.url)

    def now(minutes: int) -> dict[str, str]:
        return utilization.collect(client, cluster.inventory, T0, T0 + minutes * 60).now

    assert now(35) == {"n1": "busy", "n2": "not allocated"}  # n1: 0.5 of 2 GPUs held
    assert now(47) == {"n1": "not allocated", "n2": "idle"}  # n2 busy earlier in the window, idle now
    assert now(60) == {"n1": "not allocated", "n2": "not allocated"}  # every job gone (it read n2 idle)
    assert utilization.collect(client, cluster.inventory, T0, T0 + HOUR, job="7").now == {
        "n1": "not allocated",
        "n2": "not allocated",
    }


def now_on_a_multiple() -> float:
    return math.floor(time.time() / 15) * 15


def test_cli_util_json(prometheus: RealPrometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpufleet util SPEC --json --hours 1`` over the last hour: job 8 ended before the window."""
    now = now_on_a_multiple()
    cluster = GpuCluster(
        gpu_inventory(),
        [
            Allocation("7", "n1", (0, 1), now - 2 * HOUR, now + HOUR, (0.5, 0.0)),
            Allocation("8", "n2", (0,), now - 2 * HOUR, now - 1.5 * HOUR, 1.0),
        ],
    )
    prometheus.write(cluster.stored(tmp_path, now - 2 * HOUR, now + 15))
    path, state = begin_demo(tmp_path, monkeypatch)
    cluster.inventory.write(state.inventory_file)
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", prometheus.url)
    result = CliRunner().invoke(app, ["util", str(path), "--json", "--hours", "1"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["cluster"] == "demo" and set(document["jobs"]) == {"7"}
    assert document["nodes"]["n1"]["allocated_gpu_hours"] == pytest.approx(2, abs=0.02)
    assert document["jobs"]["7"]["busy_ratio"] == pytest.approx(0.25)


def test_validation_report_gains_the_utilization_during_the_run(
    prometheus: RealPrometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.validate.report import append_section, write_report

    cluster = two_jobs(T0)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    files = write_report(tmp_path / "report", [], [])
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", prometheus.url)
    append_section(files, "utilization", utilization.during(cluster.inventory, T0, T0 + HOUR))
    document = json.loads(files.json.read_text())
    assert document["utilization"]["available"] is True
    assert document["utilization"]["jobs"]["7"]["busy_ratio"] == 0.25
    markdown = files.markdown.read_text()
    assert markdown.startswith("# gpufleet validation report")
    assert "## GPU utilization during the run: demo" in markdown
    assert "| 7 | 2.000 | 0.500 | 25.0% |" in markdown


# ---- every scrape counts -----------------------------------------------------------------------------


def scrapes_holding(cluster: GpuCluster, tmp_path: Path, allocation: Allocation, interval: float) -> int:
    """How many of the Slurm exporter's scrapes listed ``allocation`` (what Prometheus recorded of it)."""
    from tests.monitoring.exporters import render_prometheus_config, scrape_targets

    (slurm,) = [
        t for t in scrape_targets(render_prometheus_config(cluster.inventory, tmp_path)) if t.job == "slurm"
    ]
    interval_ms = round(interval * 1000)
    phase = slurm.phase_ms(interval_ms) / 1000
    first = math.ceil((allocation.start - phase) / interval)
    return sum(1 for k in range(first, first + 100) if allocation.holds(k * interval + phase))


def test_jobs_shorter_than_a_step_get_their_gpu_hours(prometheus: RealPrometheus, tmp_path: Path) -> None:
    """A 3-day window: a step of 30 s (23.6 s from step_for, up to a multiple of the 15 s scrape). Jobs
    busy for 20 s each are seen by one or two scrapes; one sample per step would miss some of them. Their
    allocated GPU-hours are what Prometheus recorded (the Slurm exporter's scrapes that listed them x 15 s);
    used ones what the engine joined with dcgm-exporter's SM-active, scraped at its own offset, so within
    one scrape of that."""
    days = 3
    starts = [T0 + day * 24 * HOUR + 1000 + 11 * day for day in range(days)]
    starts += [s + 7 * HOUR + 4 for s in starts]
    jobs = [Allocation(str(100 + i), "n1", (0,), begin, begin + 20, 1.0) for i, begin in enumerate(starts)]
    cluster = GpuCluster(gpu_inventory(nodes=1, gpus=1), jobs)
    end = T0 + days * 24 * HOUR
    keep = {"up", "slurm_job_gpu", "DCGM_FI_PROF_SM_ACTIVE"}.__contains__
    prometheus.write(cluster.stored(tmp_path, T0 - 60, end + 60, keep=keep))
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, end)
    assert report.step == 30 and report.resolution == 15
    for job in jobs:
        recorded = scrapes_holding(cluster, tmp_path, job, 15) * 15 / HOUR
        assert recorded > 0
        usage = report.jobs.get(job.jobid)
        assert usage is not None, f"job {job.jobid} (20 s from {job.start - T0:.0f} s) missing from util"
        assert usage.allocated_gpu_hours == pytest.approx(recorded)
        assert usage.allocated_gpu_hours * HOUR - 15 <= usage.used_gpu_hours * HOUR <= recorded * HOUR + 1e-6
        assert abs(usage.allocated_gpu_hours * HOUR - 20) <= 15  # within one scrape of the truth
    assert report.nodes["n1"].gpu_hours == pytest.approx(days * 24)


def test_the_inventory_scrape_interval_sets_the_resolution(
    prometheus: RealPrometheus, tmp_path: Path
) -> None:
    """A cluster scraped every 5 s (the inventory's monitoring_scrape_interval, in its scrape config too): an
    8 s job inside a 1-hour window (step 15 s) is seen by one or two scrapes; each counts for 5 s."""
    starts = [T0 + 600 + 3 * i + 60 * i for i in range(5)]
    jobs = [Allocation(str(100 + i), "n1", (0,), begin, begin + 8, 1.0) for i, begin in enumerate(starts)]
    cluster = GpuCluster(gpu_inventory(nodes=1, gpus=1, monitoring_scrape_interval="5s"), jobs)
    loaded(prometheus, cluster, tmp_path, T0, T0 + HOUR)
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, T0, T0 + HOUR)
    assert report.resolution == 5 and report.step == 15
    for job in jobs:
        recorded = scrapes_holding(cluster, tmp_path, job, 5) * 5 / HOUR
        assert job.jobid in report.jobs, f"job {job.jobid} (8 s) missing from util"
        assert report.jobs[job.jobid].allocated_gpu_hours == pytest.approx(recorded)


@pytest.mark.parametrize(
    ("start", "seconds"),
    [
        (T0 + 5, HOUR),
        (T0 + 5.25, 3 * HOUR + 7.5),
        (T0 + 10, 2 * 24 * HOUR + 1),
        (T0, 14 * 24 * HOUR),
        (T0 + 5, 14),
    ],
)
def test_windows_count_every_scrape_once(
    prometheus: RealPrometheus, tmp_path: Path, start: float, seconds: float
) -> None:
    """One GPU allocated throughout: exactly the scrape-interval multiples in (start, end] count, each once,
    whatever the window (the head query and the range query's windows neither overlap nor leave a gap),
    and the range query stays under the engine's 11,000 points."""
    end = start + seconds
    cluster = GpuCluster(gpu_inventory(nodes=1, gpus=1), [Allocation("1", "n1", (0,), T0 - HOUR, end + HOUR)])
    only = {"slurm_job_gpu"}.__contains__
    prometheus.write(cluster.stored(tmp_path, start - 60, end + 60, keep=only, jobs=frozenset({"slurm"})))
    report = utilization.collect(PrometheusClient(prometheus.url), cluster.inventory, start, end)
    multiples = math.floor(end / 15) - math.floor(start / 15)
    assert report.jobs["1"].allocated_gpu_hours * HOUR == pytest.approx(multiples * 15)


# ---- the report `down` writes ------------------------------------------------------------------------


def test_down_writes_the_cluster_lifes_report_before_destroying(
    prometheus: RealPrometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``down`` on a cluster created an hour ago: the report covers its life, from Prometheus."""
    from datetime import UTC, datetime

    from tests.monitoring.test_teardown_report import Recording, reports

    from gpufleet.lifecycle import teardown
    from gpufleet.progress import RecordingReporter
    from gpufleet.spec import load_spec

    now = now_on_a_multiple()
    cluster = GpuCluster(
        gpu_inventory(), [Allocation("7", "n1", (0, 1, 2, 3), now - 2 * HOUR, now + HOUR, 0.25)]
    )
    prometheus.write(cluster.stored(tmp_path, now - 2 * HOUR, now + 15))
    path, state = begin_demo(tmp_path, monkeypatch)
    state.update(created_at=datetime.fromtimestamp(now - HOUR, UTC).isoformat())
    inventory: Inventory = cluster.inventory
    inventory.write(state.inventory_file)
    backend = Recording()
    monkeypatch.setattr(teardown, "backend_for", lambda spec: backend)
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", prometheus.url)
    result = teardown.down(load_spec(path), state, RecordingReporter())
    assert [p.name for p in backend.reports_at_destroy] == [
        "utilization.json",
        "utilization.md",
        "utilization.png",
    ]
    assert result.utilization["available"] is True and not result.leftovers and not state.exists()
    document: dict[str, Any] = json.loads((reports() / "utilization.json").read_text())
    allocated = document["jobs"]["7"]["allocated_gpu_hours"]
    assert allocated == pytest.approx(4, abs=4 * 60 / HOUR), (
        document
    )  # 4 GPUs for the hour (the run's seconds aside)
    assert document["jobs"]["7"]["busy_ratio"] == pytest.approx(0.25)
    assert document["nodes"]["n2"]["gpu_hours"] == pytest.approx(8, abs=8 * 60 / HOUR)


def test_scrapes_mark_a_gone_series_stale() -> None:
    """The scrape model itself: a job's series stops at the first scrape that no longer lists it."""
    cluster = GpuCluster(gpu_inventory(nodes=1, gpus=1), [Allocation("1", "n1", (0,), T0, T0 + 60)])
    (target,) = [t for t in _targets(cluster) if t.job == "slurm"]
    series = Scrapes(15_000).run([target], cluster.expose, T0 - 30, T0 + 120)
    (gpu,) = [s for s in series if s.name == "slurm_job_gpu"]
    values = [v for _t, v in gpu.samples]
    assert values == [1.0, 1.0, 1.0, 1.0, None], gpu.samples
    assert gpu.labels == {
        "__name__": "slurm_job_gpu",
        "gpu": "0",
        "instance": "10.0.0.10:9341",
        "job": "slurm",
        "jobid": "1",
        "node": "n1",
        "simulated": "false",
    }


def _targets(cluster: GpuCluster) -> list[Any]:
    import tempfile

    from tests.monitoring.exporters import render_prometheus_config, scrape_targets

    return scrape_targets(render_prometheus_config(cluster.inventory, Path(tempfile.mkdtemp())))
