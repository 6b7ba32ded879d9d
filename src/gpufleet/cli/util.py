"""``gpufleet util SPEC``: GPU-hours allocated and used, the busy ratio and the dollars wasted, per node and
per job, from the cluster's Prometheus (docs/monitoring.md)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json
from gpufleet.monitoring import utilization as util_report
from gpufleet.monitoring.prometheus import PrometheusClient, prometheus_url
from gpufleet.pipeline import load_inventory
from gpufleet.spec import load_spec

JobOpt = Annotated[str | None, typer.Option("--job", help="only this Slurm job id")]
HoursOpt = Annotated[
    float | None,
    typer.Option("--hours", help="the last N hours (default: since the cluster was created)", min=0.001),
]


def util(spec_path: SpecArg, json_out: JsonOpt = False, job: JobOpt = None, hours: HoursOpt = None) -> None:
    """GPU utilization per node and per job: GPU-hours allocated and used, busy ratio, dollars wasted."""
    spec = load_spec(spec_path)
    state, inventory = load_inventory(spec)
    end = time.time()
    start = end - hours * 3600 if hours else state.created_at.timestamp()
    with prometheus_url(inventory) as url:
        report = util_report.collect(PrometheusClient(url), inventory, start, end, job=job)
    if json_out:
        print_json(report.to_json())
        return
    render(report)


def render(report: util_report.UtilReport) -> None:
    total = report.total
    title = f"GPU utilization of {report.cluster}" + (f", job {report.job}" if report.job else "")
    if report.simulated:
        title += " (SIMULATED GPUs: SM-active from CPU use)"
    table = Table(title=title)
    for column in ("node / job", "GPU-hours", "allocated", "used", "busy", "wasted $", "now"):
        table.add_column(column)
    for name, usage in sorted(report.nodes.items()):
        table.add_row(
            name,
            f"{usage.gpu_hours:.3f}",
            f"{usage.allocated_gpu_hours:.3f}",
            f"{usage.used_gpu_hours:.3f}",
            util_report.fmt(usage.busy_ratio, ".1%"),
            util_report.fmt(usage.wasted_usd, ",.2f"),
            report.now.get(name, "-"),
        )
    for jobid, job_usage in sorted(report.jobs.items()):
        table.add_row(
            f"job {escape(jobid)}",
            "",
            f"{job_usage.allocated_gpu_hours:.3f}",
            f"{job_usage.used_gpu_hours:.3f}",
            util_report.fmt(job_usage.busy_ratio, ".1%"),
            util_report.fmt(job_usage.wasted_usd, ",.2f"),
            "",
        )
    console.print(table)
    if report.idle_alert:
        console.print(escape(report.idle_alert))
    console.print(
        f"total: {total.allocated_gpu_hours:.3f} GPU-hours allocated, {total.used_gpu_hours:.3f} used, "
        f"busy {util_report.fmt(total.busy_ratio, '.1%')}, wasted $"
        f"{util_report.fmt(total.wasted_usd, ',.2f')}"
    )
