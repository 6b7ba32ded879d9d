"""Grafana dashboard provisioning, generated (``python -m gpufleet.monitoring.rules --write`` writes it
with the rules): roles/monitoring/files/grafana/gpufleet-utilization.json and the provisioning file that
points Grafana at it. No Grafana server is needed by gpufleet; users who run one copy both files
(docs/monitoring.md).

The JSON follows Grafana's dashboard model (https://grafana.com/docs/grafana/latest/dashboards/build-
dashboards/view-dashboard-json-model/, read 2026-11-24): ``panels`` with ``gridPos``, ``type``
(``timeseries``, ``stat``, ``table``), ``targets`` of ``expr``; a ``${datasource}`` template variable of
type ``datasource`` (query ``prometheus``); provisioning by a file provider (apiVersion 1, ``providers``
with ``options.path``), per Grafana's provisioning docs.
"""

from __future__ import annotations

from typing import Any

DASHBOARD_UID = "gpufleet-utilization"

# (title, type, unit, expressions with their legend)
PANELS: tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Cluster GPU busy ratio (SM-active)", "stat", "percentunit", (("gpufleet:cluster_busy_ratio", "busy"),)),
    ("GPUs allocated", "stat", "none", (("gpufleet:cluster_gpus_allocated", "allocated"),)),
    (
        "Idle allocated GPUs cost",
        "stat",
        "currencyUSD",
        (("gpufleet:cluster_idle_gpu_cost_usd_per_hour", "$/hour"),),
    ),
    ("Busy ratio per job", "timeseries", "percentunit", (("gpufleet:job_busy_ratio", "job {{jobid}}"),)),
    (
        "SM-active per GPU",
        "timeseries",
        "percentunit",
        (("gpufleet:gpu_busy_ratio", "{{node}} GPU {{gpu}}"),),
    ),
    (
        "Tensor and DRAM active per GPU",
        "timeseries",
        "percentunit",
        (
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor {{node}}/{{gpu}}"),
            ("DCGM_FI_PROF_DRAM_ACTIVE", "DRAM {{node}}/{{gpu}}"),
        ),
    ),
    ("Idle allocated GPUs per job", "timeseries", "none", (("gpufleet:job_idle_gpus", "job {{jobid}}"),)),
    (
        "Job progress (CPU-seconds per second, per node)",
        "timeseries",
        "none",
        (("gpufleet:job_node_progress_rate", "job {{jobid}} on {{node}}"),),
    ),
    (
        "Throttled share of time",
        "timeseries",
        "percentunit",
        (("gpufleet:gpu_throttle_ratio", "{{node}}/{{gpu}}"),),
    ),
    ("Last XID per GPU", "table", "none", (("DCGM_FI_DEV_XID_ERRORS > 0", "{{node}}/{{gpu}}"),)),
    ("Slurm node states", "table", "none", (("slurm_node_state == 1", "{{node}} {{state}}"),)),
    ("Firing alerts", "table", "none", (('ALERTS{alertstate="firing"}', "{{alertname}}"),)),
)


def dashboard() -> dict[str, Any]:
    panels = []
    for index, (title, kind, unit, targets) in enumerate(PANELS):
        width = 8 if kind == "stat" else 12
        per_row = 24 // width
        panels.append(
            {
                "id": index + 1,
                "title": title,
                "type": kind,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"x": (index % per_row) * width, "y": (index // per_row) * 8, "w": width, "h": 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {
                        "refId": chr(ord("A") + n),
                        "expr": expr,
                        "legendFormat": legend,
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    }
                    for n, (expr, legend) in enumerate(targets)
                ],
            }
        )
    return {
        "uid": DASHBOARD_UID,
        "title": "gpufleet: GPU utilization, jobs and cost",
        "tags": ["gpufleet"],
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
            ]
        },
        "panels": panels,
    }


def provisioning(path: str = "/var/lib/grafana/dashboards/gpufleet") -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "gpufleet",
                "type": "file",
                "folder": "gpufleet",
                "disableDeletion": False,
                "options": {"path": path},
            }
        ],
    }


def expressions() -> list[str]:
    return [expr for _title, _kind, _unit, targets in PANELS for expr, _legend in targets]
