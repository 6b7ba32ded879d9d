"""The rules and alerts: generated from the catalog, valid for promtool, and each alert tested with
``promtool test rules`` on series that fire it and series that do not.

promtool is Debian's ``prometheus`` package (/usr/bin/promtool, 2.42 on bookworm).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.monitoring.exporters import ALL_JOBS, Allocation, GpuCluster, gpu_inventory, promtool_input_series
from tests.monitoring.rules_render import ROOT, render_rules, role_defaults

from gpufleet.catalog import load_catalog
from gpufleet.monitoring import metrics, rules
from gpufleet.monitoring.prometheus import parse_duration_ms
from gpufleet.node import slurm_exporter

PROMTOOL = shutil.which("promtool")


@pytest.fixture
def _promtool() -> None:
    if PROMTOOL is None:  # a missing tool fails: a skip would hide the rules' tests in CI
        pytest.fail("promtool missing: apt-get install prometheus (scripts/bootstrap.sh test installs it)")


needs_promtool = pytest.mark.usefixtures("_promtool")


@pytest.mark.parametrize("path", sorted(rules.generated_files()), ids=str)
def test_checked_in_files_are_the_generated_ones(path: Path) -> None:
    checked_in = (ROOT / path).read_text(encoding="utf-8")
    assert checked_in == rules.generated_files()[path], (
        f"{path} is stale: run '.venv/bin/python -m gpufleet.monitoring.rules --write'"
    )


def test_prices_come_from_the_catalog() -> None:
    catalog = load_catalog()
    priced = {
        name: t.price_per_hour_usd / t.gpu_count
        for name, t in catalog.instance_types.items()
        if t.price_per_hour_usd and t.gpu_count
    }
    assert priced, "the catalog has no priced GPU type"
    doc = yaml.safe_load(render_rules())
    got = {
        r["labels"]["instance_type"]: float(re.fullmatch(r"vector\((.+)\)", r["expr"]).group(1))  # type: ignore[union-attr]
        for r in doc["groups"][0]["rules"]
    }
    assert got == pytest.approx(priced)


@needs_promtool
def test_promtool_check_rules(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.rules.yml"
    path.write_text(render_rules(), encoding="utf-8")
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )  # type: ignore[list-item]
    assert done.returncode == 0, done.stdout + done.stderr


# ---- promtool unit tests: every alert, once firing and once not ---------------------------------------
#
# Each case is a cluster whose exporters run as they do on a node (tests/monitoring/exporters.py: the label
# sets dcgm-exporter, node_exporter and gpufleet's own exporters emit, the targets and labels of the role's
# scrape config, staleness), scraped every 15 s (the role's monitoring_scrape_interval) for 40 minutes;
# promtool evaluates the role's rules, rendered with the role's defaults (monitoring_alert_for: a firing
# alert is asserted once before its `for:` has run out and once after).

INTERVAL_MS = 15_000
SCRAPES = 40 * 4 + 1
MINUTE = 60.0
H100_NODE = {"instance_type": "p5.48xlarge"}


def _annotations(alert: str, labels: dict[str, str], value: str = "") -> dict[str, str]:
    """The alert's annotations as Prometheus expands them (only $labels.x and $value are used)."""
    doc = yaml.safe_load(render_rules())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert)
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda mt: labels.get(mt.group(1), ""), text)
        out[key] = text.replace("{{ $value }}", value).replace("{{ $value | humanizePercentage }}", value)
    return out


def _alert(name: str, labels: dict[str, str], value: str = "") -> dict[str, Any]:
    severity = {"JobBusyNoProgress": "critical", "GpuXidError": "critical", "NodeDown": "critical"}
    return {
        "exp_labels": {"severity": severity.get(name, "warning"), **labels},
        "exp_annotations": _annotations(name, labels, value),
    }


def _proc(jobid: str, cpu_seconds: float, pid: int = 4242) -> slurm_exporter.Proc:
    return slurm_exporter.Proc(pid=pid, start=1000, jobid=jobid, cpu_seconds=cpu_seconds)


def _until(minutes: float) -> float:
    return minutes * MINUTE


@dataclass(frozen=True)
class Case:
    cluster: Callable[[], GpuCluster]
    tests: dict[str, Any]


def _idle() -> GpuCluster:
    # job 7 holds GPUs 0 (SM-active 0.01) and 1 (0.9) of n1
    return GpuCluster(gpu_inventory(gpus=2), [Allocation("7", "n1", (0, 1), 0, _until(60), (0.01, 0.9))])


def _unallocated_idle() -> GpuCluster:
    return GpuCluster(gpu_inventory(nodes=1, gpus=1))


def _stopped_rank() -> GpuCluster:
    # job 9 on GPU 0 of n1 and n2, both busy; the rank on n2 stopped (its CPU time stays at 100 s)
    return GpuCluster(
        gpu_inventory(gpus=1),
        [Allocation("9", n, (0,), 0, _until(60), 0.95) for n in ("n1", "n2")],
        processes=lambda node, t: [_proc("9", t if node == "n1" else 100.0)],
    )


def _progressing() -> GpuCluster:
    return GpuCluster(
        gpu_inventory(gpus=1),
        [Allocation("9", n, (0,), 0, _until(60), 0.95) for n in ("n1", "n2")],
        processes=lambda node, t: [_proc("9", t if node == "n1" else 0.9 * t)],
        heartbeats=lambda node, t: {"9": t} if node == "n1" else {},
    )


def _hung_collective() -> GpuCluster:
    # job 11 spins its CPU and GPU in a hung collective: its heartbeat, touched at 0, never again
    return GpuCluster(
        gpu_inventory(nodes=1, gpus=1),
        [Allocation("11", "n1", (0,), 0, _until(60), 1.0)],
        processes=lambda node, t: [_proc("11", t)],
        heartbeats=lambda node, t: {"11": 0.0},
    )


def _no_process() -> GpuCluster:
    # job 5 holds n1 with no process there; job 6 runs 3 on n2; n3 (job 8's) does not answer
    return GpuCluster(
        gpu_inventory(nodes=3, gpus=1),
        [Allocation(j, n, (0,), 0, _until(60)) for j, n in (("5", "n1"), ("6", "n2"), ("8", "n3"))],
        processes=lambda node, t: [_proc("6", t, pid) for pid in (1, 2, 3)] if node == "n2" else [],
        unreachable=lambda node, t: node == "n3",
    )


def _xid() -> GpuCluster:
    # GPU 3 of n1 reports XID 79 from minute 10 (before: 0); GPU 0 of n2 has shown XID 13 all along
    def fields(node: str, gpu: int, t: float) -> dict[str, float]:
        if (node, gpu) == ("n1", 3):
            return {"DCGM_FI_DEV_XID_ERRORS": 79.0 if t >= _until(10) else 0.0}
        return {"DCGM_FI_DEV_XID_ERRORS": 13.0 if (node, gpu) == ("n2", 0) else 0.0}

    return GpuCluster(gpu_inventory(gpus=4), dcgm_fields=fields)


def _throttled() -> GpuCluster:
    # DCGM's violation counters count microseconds: n1 GPU 0 throttled half of every second, n2's 1/60
    def fields(node: str, gpu: int, t: float) -> dict[str, float]:
        share = 0.5 if node == "n1" else 1 / 60
        return {"DCGM_FI_DEV_POWER_VIOLATION": share * t * 1e6, "DCGM_FI_DEV_THERMAL_VIOLATION": 0.0}

    return GpuCluster(gpu_inventory(gpus=1), dcgm_fields=fields)


def _nvlink() -> GpuCluster:
    # n1 GPU 2's flit CRC errors go 0 -> 5 at minute 10; n2 GPU 0 has had 7 replays all along
    def fields(node: str, gpu: int, t: float) -> dict[str, float]:
        flit = 5.0 if (node, gpu) == ("n1", 2) and t >= _until(10) else 0.0
        replay = 7.0 if (node, gpu) == ("n2", 0) else 0.0
        return {
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": flit,
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": replay,
        }

    return GpuCluster(gpu_inventory(gpus=3), dcgm_fields=fields)


def _fabric() -> GpuCluster:
    # n1's mlx5_0 port 1 receives 2 bad packets a minute; n2's mlx5_1 went down once, long ago
    def ports(node: str, t: float) -> dict[tuple[str, str], dict[str, float]]:
        if node == "n1":
            return {("mlx5_0", "1"): {"node_infiniband_port_errors_received_total": 2 * (t // MINUTE)}}
        if node == "n2":
            return {("mlx5_1", "1"): {"node_infiniband_link_downed_total": 1.0}}
        return {}

    return GpuCluster(gpu_inventory(gpus=1), infiniband=ports)


def _node_down() -> GpuCluster:
    # n1 stops answering at minute 3 (every exporter on it)
    return GpuCluster(gpu_inventory(gpus=1), unreachable=lambda node, t: node == "n1" and t >= _until(3))


def _slurm_down() -> GpuCluster:
    return GpuCluster(gpu_inventory(gpus=1), slurm_state=lambda node, t: "down*" if node == "n1" else None)


def _cost() -> GpuCluster:
    # Binary fractions: avg's float sum is exact in any order of the series (0.04 and 0.71 gave
    # 0.24999999999999994 in one CI run and 0.25 in others).
    return GpuCluster(
        gpu_inventory(gpus=3), [Allocation("7", "n1", (0, 1, 2), 0, _until(60), (0.0, 0.03125, 0.71875))]
    )


def _per_gpu() -> float:
    itype = load_catalog().instance_types["p5.48xlarge"]
    assert itype.price_per_hour_usd and itype.gpu_count
    return round(itype.price_per_hour_usd / itype.gpu_count, 6)


def _none(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


CASES: dict[str, Case] = {
    "an idle GPU fires after 15 minutes, a busy GPU of the same job does not": Case(
        _idle,
        {
            "alert_rule_test": [
                _none("GpuAllocatedIdle", "14m"),
                {
                    "eval_time": "16m",
                    "alertname": "GpuAllocatedIdle",
                    "exp_alerts": [_alert("GpuAllocatedIdle", {"jobid": "7", "node": "n1", "gpu": "0"})],
                },
            ]
        },
    ),
    "an unallocated idle GPU is no alert": Case(
        _unallocated_idle, {"alert_rule_test": [_none("GpuAllocatedIdle", "30m")]}
    ),
    "a stopped rank: busy GPUs, one node's CPU time flat, fires after 10 minutes": Case(
        _stopped_rank,
        {
            "alert_rule_test": [
                _none("JobBusyNoProgress", "9m"),
                {
                    "eval_time": "11m",
                    "alertname": "JobBusyNoProgress",
                    "exp_alerts": [_alert("JobBusyNoProgress", {"jobid": "9"})],
                },
            ]
        },
    ),
    "a busy job whose every node progresses is no alert": Case(
        _progressing, {"alert_rule_test": [_none("JobBusyNoProgress", "30m")]}
    ),
    "a hung collective that spins the CPU: the heartbeat goes stale at 10 minutes, fires 10 later": Case(
        _hung_collective,
        {
            "alert_rule_test": [
                _none("JobBusyNoProgress", "19m"),
                {
                    "eval_time": "21m",
                    "alertname": "JobBusyNoProgress",
                    "exp_alerts": [_alert("JobBusyNoProgress", {"jobid": "11"})],
                },
            ]
        },
    ),
    "an allocation with no process fires after 10 minutes; processes, or a silent node, do not": Case(
        _no_process,
        {
            "alert_rule_test": [
                _none("AllocationWithoutProcess", "9m"),
                {
                    "eval_time": "11m",
                    "alertname": "AllocationWithoutProcess",
                    "exp_alerts": [_alert("AllocationWithoutProcess", {"jobid": "5", "node": "n1"})],
                },
            ]
        },
    ),
    "a new XID fires at once; an old one that does not change does not": Case(
        _xid,
        {
            "alert_rule_test": [
                _none("GpuXidError", "9m"),
                {
                    "eval_time": "11m",
                    "alertname": "GpuXidError",
                    "exp_alerts": [_alert("GpuXidError", {"node": "n1", "gpu": "3"}, value="79")],
                },
                _none("GpuXidError", "29m"),
            ]
        },
    ),
    # rate() divides by its whole 5-minute window: the ratio crosses 10% a minute in, and fires 10 later.
    "throttled half the time fires 10 minutes after it shows; 1/60 of the time does not": Case(
        _throttled,
        {
            "alert_rule_test": [
                _none("GpuThrottled", "11m"),
                {
                    "eval_time": "12m",
                    "alertname": "GpuThrottled",
                    "exp_alerts": [_alert("GpuThrottled", {"node": "n1", "gpu": "0"}, value="50%")],
                },
            ],
            "promql_expr_test": [
                {
                    "expr": "gpufleet:gpu_throttle_ratio",
                    "eval_time": "20m",
                    "exp_samples": [
                        {"labels": 'gpufleet:gpu_throttle_ratio{node="n1",gpu="0"}', "value": 0.5},
                        {"labels": 'gpufleet:gpu_throttle_ratio{node="n2",gpu="0"}', "value": 1 / 60},
                    ],
                }
            ],
        },
    ),
    "NVLink errors that grow fire at once; a constant count does not": Case(
        _nvlink,
        {
            "alert_rule_test": [
                _none("NvlinkErrors", "9m"),
                {
                    "eval_time": "11m",
                    "alertname": "NvlinkErrors",
                    "exp_alerts": [_alert("NvlinkErrors", {"node": "n1", "gpu": "2"})],
                },
            ]
        },
    ),
    "fabric port errors that grow fire; a constant count does not": Case(
        _fabric,
        {
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "FabricPortErrors",
                    "exp_alerts": [
                        _alert("FabricPortErrors", {"node": "n1", "device": "mlx5_0", "port": "1"})
                    ],
                }
            ]
        },
    ),
    "a node that stops answering fires after 2 minutes; one that answers does not": Case(
        _node_down,
        {
            "alert_rule_test": [
                _none("NodeDown", "4m"),
                {
                    "eval_time": "6m",
                    "alertname": "NodeDown",
                    "exp_alerts": [
                        _alert(
                            "NodeDown",
                            {"job": "gpufleet-jobs", "node": "n1", "instance": "10.0.0.11:9342"},
                        ),
                        _alert(
                            "NodeDown",
                            {"job": "node", "node": "n1", "instance": "10.0.0.11:9100", **H100_NODE},
                        ),
                    ],
                },
            ]
        },
    ),
    "Slurm marks a node down: fires after 2 minutes; idle does not": Case(
        _slurm_down,
        {
            "alert_rule_test": [
                _none("SlurmNodeDown", "1m"),
                {
                    "eval_time": "3m",
                    "alertname": "SlurmNodeDown",
                    "exp_alerts": [
                        _alert(
                            "SlurmNodeDown",
                            {"node": "n1", "state": "down*", "job": "slurm", "instance": "10.0.0.10:9341"},
                        )
                    ],
                },
            ]
        },
    ),
    "idle GPUs cost the catalog's price per GPU-hour; busy ratio per job": Case(
        _cost,
        {
            "promql_expr_test": [
                {
                    "expr": "gpufleet:idle_gpu_cost_usd_per_hour",
                    "eval_time": "10m",
                    "exp_samples": [
                        {
                            "labels": 'gpufleet:idle_gpu_cost_usd_per_hour{jobid="7",node="n1"}',
                            "value": 2 * _per_gpu(),
                        }
                    ],
                },
                {
                    "expr": "gpufleet:job_busy_ratio",
                    "eval_time": "10m",
                    "exp_samples": [{"labels": 'gpufleet:job_busy_ratio{jobid="7"}', "value": 0.25}],
                },
                {
                    "expr": "gpufleet:job_idle_gpus",
                    "eval_time": "10m",
                    "exp_samples": [{"labels": 'gpufleet:job_idle_gpus{jobid="7"}', "value": 2}],
                },
            ]
        },
    ),
}


@needs_promtool
@pytest.mark.parametrize("case", sorted(CASES), ids=lambda c: c[:60])
def test_promtool_unit(case: str, tmp_path: Path) -> None:
    """The case's cluster, scraped, and the role's rules at the role's default settings."""
    defaults = role_defaults()
    interval = defaults["monitoring_scrape_interval"]
    assert parse_duration_ms(interval) == INTERVAL_MS, "the cases are scraped at the role's default interval"
    rules_file = tmp_path / "gpufleet.rules.yml"
    rules_file.write_text(render_rules(), encoding="utf-8")
    stored = CASES[case].cluster().stored(tmp_path, 0, (SCRAPES - 1) * 15, jobs=ALL_JOBS, aligned=True)
    test_doc = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": interval,
        "tests": [
            {
                "interval": interval,
                "input_series": promtool_input_series(stored, INTERVAL_MS, SCRAPES),
                **CASES[case].tests,
            }
        ],
    }
    test_file = tmp_path / "test.yml"
    test_file.write_text(yaml.safe_dump(test_doc, sort_keys=False), encoding="utf-8")
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )  # type: ignore[list-item]
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested() -> None:
    doc = yaml.safe_load(render_rules())
    alerts = {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    fired = {
        t["alertname"] for c in CASES.values() for t in c.tests.get("alert_rule_test", []) if t["exp_alerts"]
    }
    assert alerts == fired


@needs_promtool
def test_dashboard_expressions_parse_and_name_real_series(tmp_path: Path) -> None:
    """Every panel's expression parses (promtool checks it as a recording rule) and names a series the
    rules record or an exporter (DCGM, Slurm, Prometheus's own ALERTS) emits."""
    from gpufleet.monitoring import dashboards

    exprs = dashboards.expressions()
    doc = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )  # type: ignore[list-item]
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = {
        r["record"] for g in yaml.safe_load(render_rules())["groups"] for r in g["rules"] if "record" in r
    }
    dcgm = {f.name for f in metrics.DCGM_FIELDS}
    for expr in exprs:
        name = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", expr).group(0)  # type: ignore[union-attr]
        assert name in recorded | dcgm | {"slurm_node_state", "ALERTS"}, expr
