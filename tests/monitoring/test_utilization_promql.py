"""The subqueries ``gpufleet util`` sends, evaluated by Prometheus's own engine (``promtool test rules``,
Debian 12's Prometheus 2.42, the version on the clusters): at every point the query asks for, the sum
Prometheus returns is the samples at the scrape-interval multiples of that point's window, and those
windows hold every multiple of the report's window exactly once (no point on a multiple: a 2.x range
includes its lower bound, docs/querying/basics.md "Range Vector Selectors")."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpufleet.monitoring import utilization
from gpufleet.monitoring.prometheus import Series, parse_duration_ms

PROMTOOL = shutil.which("promtool")
JOB = 'slurm_job_gpu{jobid="%s",node="n1",gpu="0"}'


class Recording:
    """Stands in for PrometheusClient: notes each query (expr, evaluation times in ms) and answers nothing."""

    def __init__(self) -> None:
        self.points: list[tuple[str, int]] = []

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        assert at is not None
        self.points.append((expr, round(at * 1000)))
        return []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        begin, stop, every = round(start * 1000), round(end * 1000), round(step * 1000)
        self.points += [(expr, t) for t in range(begin, stop + 1, every)]  # both ends, as Prometheus does
        return []


@pytest.mark.parametrize(("start", "end"), [(2.0, 600.0), (0.0, 600.0), (7.5, 1000.0)])
def test_prometheus_sums_every_scrape_once(tmp_path: Path, start: float, end: float) -> None:
    if PROMTOOL is None:  # a missing tool fails: a skip would hide the test in CI
        pytest.fail("promtool missing: apt-get install prometheus (scripts/bootstrap.sh test installs it)")
    windows = utilization.Windows.over(start, end, 15.0)
    # a step of 3 scrapes (45 s) and a leftover head, rather than step_for's 15 s for so short a window
    count = windows.last - windows.first + 1
    windows = utilization.Windows(15000, 45000, windows.first, windows.last, count // 3, count % 3)
    client = Recording()
    windows.integrate(client, utilization.ALLOCATED)  # type: ignore[arg-type]
    busy = {45_000, 60_000}  # job 2 is seen by the scrapes at 45 s and 60 s, stale from 75 s
    seen: list[int] = []
    tests = []
    for expr, t in client.points:
        window = parse_duration_ms(expr.rsplit("[", 1)[1].split(":")[0])
        multiples = [m for m in range(0, t + 1, 15000) if m >= t - window]  # Prometheus 2.x: [t - range, t]
        seen += multiples
        samples = [{"labels": '{gpu="0", jobid="1", node="n1"}', "value": len(multiples)}]
        if busy & set(multiples):
            samples.append({"labels": '{gpu="0", jobid="2", node="n1"}', "value": len(busy & set(multiples))})
        tests.append({"expr": expr, "eval_time": f"{t}ms", "exp_samples": samples})
    assert sorted(seen) == list(range(windows.first * 15000, windows.last * 15000 + 1, 15000))
    assert windows.first * 15 > start and windows.last * 15 <= end
    (tmp_path / "empty.yml").write_text("groups: []\n")
    document = {
        "rule_files": ["empty.yml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": JOB % 1, "values": "1x80"},
                    {"series": JOB % 2, "values": "_ _ _ 1 1 stale"},
                ],
                "promql_expr_test": tests,
            }
        ],
    }
    (tmp_path / "utilization.test.yml").write_text(yaml.safe_dump(document))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "utilization.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
