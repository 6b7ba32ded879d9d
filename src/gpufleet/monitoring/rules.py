"""The Prometheus recording rules and alerts, generated (``python -m gpufleet.monitoring.rules``).

The output is roles/monitoring/templates/gpufleet-rules.yml.j2: Prometheus rule YAML in which the alerts'
``for:`` durations, the rate window and the thresholds are the role's variables (``monitoring_alert_for``,
``monitoring_rules_window``, ``monitoring_thresholds``), and Prometheus's own ``{{ $labels.x }}`` templates
sit in ``{% raw %}`` blocks. The hourly prices are generated from the catalog (``catalog/instances.yaml``):
one recording rule per priced GPU type, never copied by hand; tests/monitoring compares the checked-in
template with this module's output, so a catalog change without a regenerated template fails the tests.

Busy is DCGM's SM-active (``DCGM_FI_PROF_SM_ACTIVE``), joined to the Slurm allocation on (node, gpu).
Progress is the job's CPU time per node (``gpufleet_job_cpu_seconds_total``) or, where the job writes one,
its heartbeat (``gpufleet_job_heartbeat_timestamp_seconds``): see docs/monitoring.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.monitoring import metrics as m

TEMPLATE_PATH = Path("roles/monitoring/templates/gpufleet-rules.yml.j2")
DCGM_COUNTERS_PATH = Path("roles/monitoring/files/dcgm-counters.csv")
DASHBOARD_PATH = Path("roles/monitoring/files/grafana/gpufleet-utilization.json")
PROVISIONING_PATH = Path("roles/monitoring/files/grafana/gpufleet-dashboards.yml")

# What the role renders: the window every rule averages over, and the thresholds alerts compare against.
WINDOW = "{{ monitoring_rules_window }}"
THRESHOLDS = "monitoring_thresholds"


def _alert_delay(name: str) -> str:
    return "{{ monitoring_alert_for." + name + " }}"


def _threshold(name: str) -> str:
    return "{{ " + THRESHOLDS + "." + name + " }}"


def _prom(text: str) -> str:
    """Prometheus's own alert template text, kept away from Jinja."""
    return "{% raw %}" + text + "{% endraw %}"


def _sum_of_rates(counters: tuple[str, ...]) -> str:
    """The per-GPU sum of the counters' rates, present when any of them is (``rate`` drops the metric
    name, so one selector over several names would collide on equal label sets)."""
    each = [f"sum by (node, gpu) (rate({c}[{WINDOW}]))" for c in counters]
    return " + ".join(each) + "".join(f" or {e}" for e in each)


def _any_grew(counters: tuple[str, ...], by: str) -> str:
    """Series (by ``by``) for which any of the counters grew within the window."""
    return " or ".join(f"(sum by ({by}) (increase({c}[{WINDOW}])) > 0)" for c in counters)


def price_rules(catalog: Catalog) -> list[dict[str, Any]]:
    """One rule per GPU instance type with a price: its on-demand price per GPU-hour."""
    rules: list[dict[str, Any]] = []
    for name, itype in sorted(catalog.instance_types.items()):
        if itype.price_per_hour_usd is None or itype.gpu_count == 0:
            continue
        per_gpu = round(itype.price_per_hour_usd / itype.gpu_count, 6)
        rules.append(
            {
                "record": "gpufleet:instance_gpu_price_usd_per_hour",
                "expr": f"vector({per_gpu})",
                "labels": {"instance_type": name, "price_region": itype.price_region or ""},
            }
        )
    return rules


def recording_rules() -> list[dict[str, Any]]:
    busy = "gpufleet:gpu_busy_ratio"
    job_gpu = "gpufleet:job_gpu_busy_ratio"
    return [
        {"record": busy, "expr": f"max by (node, gpu) (avg_over_time({m.SM_ACTIVE}[{WINDOW}]))"},
        {
            "record": job_gpu,
            "expr": f"max by (jobid, node, gpu) ({m.JOB_GPU}) * on (node, gpu) group_left () {busy}",
        },
        {"record": "gpufleet:job_node_busy_ratio", "expr": f"avg by (jobid, node) ({job_gpu})"},
        {"record": "gpufleet:job_busy_ratio", "expr": f"avg by (jobid) ({job_gpu})"},
        {"record": "gpufleet:gpu_allocated_idle", "expr": f"{job_gpu} < bool {_threshold('idle_below')}"},
        {"record": "gpufleet:job_idle_gpus", "expr": "sum by (jobid) (gpufleet:gpu_allocated_idle)"},
        {"record": "gpufleet:cluster_gpus_allocated", "expr": f"count ({job_gpu})"},
        {"record": "gpufleet:cluster_busy_ratio", "expr": f"avg ({busy})"},
        {
            "record": "gpufleet:job_node_progress_rate",
            "expr": f"sum by (jobid, node) (rate({m.JOB_CPU_SECONDS}[{WINDOW}]))",
        },
        {
            "record": "gpufleet:gpu_throttle_ratio",
            "expr": f"({_sum_of_rates(m.VIOLATION_COUNTERS)}) * {m.VIOLATION_SECONDS_PER_UNIT}",
        },
        {
            "record": "gpufleet:node_gpu_price_usd_per_hour",
            "expr": (
                f'max by (node, instance_type) (up{{job="{m.SCRAPE_NODE}"}}) * 0'
                " + on (instance_type) group_left () gpufleet:instance_gpu_price_usd_per_hour"
            ),
        },
        {
            "record": "gpufleet:idle_gpu_cost_usd_per_hour",
            "expr": (
                "sum by (jobid, node) (gpufleet:gpu_allocated_idle)"
                " * on (node) group_left () gpufleet:node_gpu_price_usd_per_hour"
            ),
        },
        {
            "record": "gpufleet:cluster_idle_gpu_cost_usd_per_hour",
            "expr": "sum (gpufleet:idle_gpu_cost_usd_per_hour)",
        },
    ]


def alert_rules() -> list[dict[str, Any]]:
    return [
        {
            "alert": "GpuAllocatedIdle",
            "expr": "gpufleet:gpu_allocated_idle == 1",
            "for": _alert_delay("gpu_idle"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom(
                    "job {{ $labels.jobid }} holds GPU {{ $labels.gpu }} of {{ $labels.node }} idle"
                ),
                "description": "SM-active below the idle threshold while Slurm has the GPU allocated: "
                "the job "
                "pays for a GPU it does not use (gpufleet:idle_gpu_cost_usd_per_hour says how much).",
            },
        },
        {
            "alert": "JobBusyNoProgress",
            "expr": (
                f"(max by (jobid) (gpufleet:job_node_busy_ratio) > {_threshold('busy_above')})"
                " and on (jobid) ("
                f"(min by (jobid) (gpufleet:job_node_progress_rate) < {_threshold('progress_below')})"
                f" or on (jobid) (max by (jobid) (time() - {m.JOB_HEARTBEAT})"
                f" > {_threshold('heartbeat_stale_seconds')})"
                ")"
            ),
            "for": _alert_delay("no_progress"),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": _prom("job {{ $labels.jobid }} keeps GPUs busy but makes no progress"),
                "description": "One of its nodes' CPU time stopped growing (or its heartbeat went "
                "stale) while "
                "its GPUs stay busy: a suspected hung collective (a stopped or lost rank).",
            },
        },
        {
            "alert": "AllocationWithoutProcess",
            "expr": (
                f"(max by (jobid, node) ({m.JOB_NODE}) unless on (jobid, node) ({m.JOB_PROCESSES} > 0))"
                f' and on (node) (up{{job="{m.SCRAPE_JOBS}"}} == 1)'
            ),
            "for": _alert_delay("no_process"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom("job {{ $labels.jobid }} holds {{ $labels.node }} with no process on it"),
                "description": "Slurm has the node allocated to the job, and no process of the job "
                "runs there "
                "(an salloc left open, a job whose ranks all exited).",
            },
        },
        {
            "alert": "GpuXidError",
            # dcgm-exporter labels the series with the XID itself (err_code, err_msg: toMetric in
            # internal/pkg/collector/gpu_collector.go, NVIDIA/dcgm-exporter@4.4.2-4.7.1), so a new XID is a
            # new series whose own changes() is 0: the per-GPU value is what changes.
            "expr": (
                f"(max by (node, gpu) ({m.XID_ERRORS}) > 0)"
                f" and on (node, gpu) (changes((max by (node, gpu) ({m.XID_ERRORS}))[{WINDOW}:]) > 0)"
            ),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": _prom("new XID {{ $value }} on {{ $labels.node }} GPU {{ $labels.gpu }}"),
                "description": "DCGM_FI_DEV_XID_ERRORS changed: the driver reported a new XID (the value is "
                "the XID code, NVIDIA's XID catalog says what it means).",
            },
        },
        {
            "alert": "GpuThrottled",
            "expr": f"gpufleet:gpu_throttle_ratio > {_threshold('throttle_above')}",
            "for": _alert_delay("throttle"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom(
                    "{{ $labels.node }} GPU {{ $labels.gpu }} throttled "
                    "{{ $value | humanizePercentage }} of the time"
                ),
                "description": "Power and thermal violation time (DCGM_FI_DEV_POWER_VIOLATION, "
                "DCGM_FI_DEV_THERMAL_VIOLATION) as a share of wall time.",
            },
        },
        {
            "alert": "NvlinkErrors",
            "expr": _any_grew(m.NVLINK_ERROR_COUNTERS, "node, gpu"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom("NVLink errors on {{ $labels.node }} GPU {{ $labels.gpu }}"),
                "description": "NVLink CRC, replay or recovery error counters grew.",
            },
        },
        {
            "alert": "FabricPortErrors",
            "expr": _any_grew(m.FABRIC_ERROR_COUNTERS, "node, device, port"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom(
                    "fabric port errors on {{ $labels.node }} {{ $labels.device }} port {{ $labels.port }}"
                ),
                "description": "InfiniBand/RoCE port error counters (node_exporter's infiniband "
                "collector) grew.",
            },
        },
        {
            "alert": "NodeDown",
            "expr": f'up{{job=~"{m.SCRAPE_NODE}|{m.SCRAPE_JOBS}"}} == 0',
            "for": _alert_delay("node_down"),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": _prom("{{ $labels.node }} does not answer ({{ $labels.job }} exporter)"),
                "description": "Prometheus cannot scrape the node: it is down or unreachable.",
            },
        },
        {
            "alert": "SlurmNodeDown",
            "expr": f'{m.NODE_STATE}{{state=~"down.*|fail.*|drain.*|.*[*]"}} == 1',
            "for": _alert_delay("node_down"),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": _prom("Slurm has {{ $labels.node }} {{ $labels.state }}"),
                "description": "Slurm marks the node down, failed, drained or not responding (state "
                "ends in '*').",
            },
        },
    ]


def rules_document(catalog: Catalog | None = None) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "gpufleet-prices", "rules": price_rules(catalog or load_catalog())},
            {"name": "gpufleet-utilization", "rules": recording_rules()},
            {"name": "gpufleet-alerts", "rules": alert_rules()},
        ]
    }


HEADER = (
    "# Generated by `python -m gpufleet.monitoring.rules` from src/gpufleet/monitoring/rules.py and the\n"
    "# catalog's prices (src/gpufleet/catalog/instances.yaml): do not edit by hand. Rendered by the\n"
    "# monitoring role (its variables: monitoring_alert_for, monitoring_rules_window,\n"
    "# monitoring_thresholds).\n"
)


def render_template(catalog: Catalog | None = None) -> str:
    body = yaml.safe_dump(rules_document(catalog), sort_keys=False, width=200, allow_unicode=True)
    return HEADER + "---\n" + body


class _IndentedDumper(yaml.SafeDumper):
    """Sequences indented under their key, as yamllint (ansible-lint) wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def render_dcgm_counters() -> str:
    """dcgm-exporter's counter CSV (field, type, help), as its etc/*.csv files are written."""
    lines = [
        "# Generated by `python -m gpufleet.monitoring.rules --write` from",
        "# src/gpufleet/monitoring/metrics.py (DCGM_FIELDS, with their sources): do not edit by hand.",
        "# DCGM FIELD, Prometheus metric type, help message",
    ]
    lines += [f"{f.name}, {f.kind}, {f.help}" for f in m.DCGM_FIELDS]
    return "\n".join(lines) + "\n"


def generated_files() -> dict[Path, str]:
    """Every file the role ships that is generated here, by its path under the project root."""
    import json

    from gpufleet.monitoring import dashboards

    return {
        TEMPLATE_PATH: render_template(),
        DCGM_COUNTERS_PATH: render_dcgm_counters(),
        DASHBOARD_PATH: json.dumps(dashboards.dashboard(), indent=2) + "\n",
        PROVISIONING_PATH: "# Generated by `python -m gpufleet.monitoring.rules --write`: copy to Grafana's\n"
        "# provisioning/dashboards/ and the dashboard JSON to the path below (docs/monitoring.md).\n"
        + yaml.dump(dashboards.provisioning(), Dumper=_IndentedDumper, sort_keys=False),
    }


def main(argv: list[str]) -> int:
    """``--write``: regenerate the role's generated files; otherwise print the rules template."""
    if "--write" in argv:
        from gpufleet.paths import project_root

        for path, text in generated_files().items():
            (project_root() / path).parent.mkdir(parents=True, exist_ok=True)
            (project_root() / path).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(render_template())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
