"""GPU utilization of a cluster over a window, from Prometheus: per node and per job, GPU-hours allocated
and used, the busy ratio, and dollars wasted (``gpufleet util``, the validation report, the report ``down``
writes before it destroys anything).

Definitions (docs/monitoring.md):
- a GPU is *allocated* while Slurm has it allocated to a job (``slurm_job_gpu``);
- *used* GPU-hours integrate SM-active (``DCGM_FI_PROF_SM_ACTIVE``, 0..1) over the allocated time, so one
  GPU at 40% SM-active for an hour is 0.4 GPU-hours used;
- the *busy ratio* is used / allocated;
- *wasted dollars*: allocated-but-not-used GPU-hours times the node's price per GPU-hour (the catalog's
  on-demand price / GPUs), plus, per node, the GPU-hours no job held (``unallocated``): the node bills
  for them too.
Each series is integrated sample by sample (value x step), the step chosen by ``prometheus.step_for``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog import load_catalog
from gpufleet.inventory.model import Inventory
from gpufleet.monitoring import metrics as m
from gpufleet.monitoring.prometheus import PrometheusClient, Series, step_for

ALLOCATED = f"max by (jobid, node, gpu) ({m.JOB_GPU})"
USED = f"{ALLOCATED} * on (node, gpu) group_left () max by (node, gpu) ({m.SM_ACTIVE})"
CAPACITY = f"count by (node) (max by (node, gpu) ({m.SM_ACTIVE}))"
SIMULATED = f'count ({m.SM_ACTIVE}{{simulated="true"}})'


def _hours(series: Series, step: float, end: float) -> float:
    """GPU-hours of a 0..1 (or count) series: each sample stands for the step after it, so the sample a
    range query returns at its end (ranges include both ends) stands for nothing inside the window."""
    return sum(value for t, value in series.values if t < end - 1e-6) * step / 3600.0


@dataclass
class Usage:
    allocated_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    wasted_usd: float | None = None

    @property
    def busy_ratio(self) -> float | None:
        return self.used_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else None

    def to_json(self) -> dict[str, Any]:
        return {
            "allocated_gpu_hours": round(self.allocated_gpu_hours, 4),
            "used_gpu_hours": round(self.used_gpu_hours, 4),
            "busy_ratio": None if self.busy_ratio is None else round(self.busy_ratio, 4),
            "wasted_usd": None if self.wasted_usd is None else round(self.wasted_usd, 2),
        }


@dataclass
class NodeUsage(Usage):
    gpu_hours: float = 0.0  # what the node's GPUs offered over the window
    price_per_gpu_hour: float | None = None

    @property
    def unallocated_gpu_hours(self) -> float:
        return max(self.gpu_hours - self.allocated_gpu_hours, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "gpu_hours": round(self.gpu_hours, 4),
            "unallocated_gpu_hours": round(self.unallocated_gpu_hours, 4),
            "price_per_gpu_hour_usd": self.price_per_gpu_hour,
        }


@dataclass
class UtilReport:
    cluster: str
    start: float
    end: float
    step: float
    simulated: bool
    nodes: dict[str, NodeUsage] = field(default_factory=dict)
    jobs: dict[str, Usage] = field(default_factory=dict)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (time, busy GPUs)
    job: str | None = None

    @property
    def total(self) -> Usage:
        total = Usage()
        for usage in self.nodes.values():
            total.allocated_gpu_hours += usage.allocated_gpu_hours
            total.used_gpu_hours += usage.used_gpu_hours
        wasted = [u.wasted_usd for u in self.nodes.values() if u.wasted_usd is not None]
        total.wasted_usd = sum(wasted) if wasted else None
        return total

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "start": self.start,
            "end": self.end,
            "step_seconds": self.step,
            "job": self.job,
            "simulated": self.simulated,
            "total": self.total.to_json(),
            "nodes": {name: usage.to_json() for name, usage in sorted(self.nodes.items())},
            "jobs": {jobid: usage.to_json() for jobid, usage in sorted(self.jobs.items(), key=_job_key)},
        }


def _job_key(item: tuple[str, Usage]) -> tuple[int, str]:
    return (int(item[0]) if item[0].isdigit() else 0, item[0])


def node_prices(inventory: Inventory) -> dict[str, float]:
    """Per node, the catalog's on-demand price per GPU-hour of its instance type (where it has one)."""
    catalog = load_catalog()
    prices: dict[str, float] = {}
    for host in inventory.hosts:
        itype = catalog.instance_types.get(host.instance_type)
        if itype and itype.price_per_hour_usd and itype.gpu_count:
            prices[host.name] = itype.price_per_hour_usd / itype.gpu_count
    return prices


def collect(
    client: PrometheusClient,
    inventory: Inventory,
    start: float,
    end: float,
    job: str | None = None,
) -> UtilReport:
    """The utilization report of ``inventory``'s cluster between ``start`` and ``end`` (unix seconds)."""
    step = step_for(start, end)
    selector = f'{{jobid="{job}"}}' if job else ""
    allocated = client.query_range(ALLOCATED.replace(m.JOB_GPU, m.JOB_GPU + selector), start, end, step)
    used = client.query_range(USED.replace(m.JOB_GPU, m.JOB_GPU + selector), start, end, step)
    capacity = [] if job else client.query_range(CAPACITY, start, end, step)
    simulated = bool(client.query_range(SIMULATED, start, end, step))
    prices = node_prices(inventory)
    report = UtilReport(inventory.cluster, start, end, step, simulated, job=job)
    for host in inventory.compute:
        report.nodes[host.name] = NodeUsage(price_per_gpu_hour=prices.get(host.name))
    for series in capacity:
        report.nodes.setdefault(series.labels.get("node", "?"), NodeUsage()).gpu_hours += _hours(
            series, step, report.end
        )
    for kind, found in (("allocated", allocated), ("used", used)):
        for series in found:
            node, jobid = series.labels.get("node", "?"), series.labels.get("jobid", "?")
            hours = _hours(series, step, report.end)
            for usage in (report.nodes.setdefault(node, NodeUsage()), report.jobs.setdefault(jobid, Usage())):
                setattr(usage, f"{kind}_gpu_hours", getattr(usage, f"{kind}_gpu_hours") + hours)
    _price(report, allocated, used, prices, step)
    report.timeline = _timeline(used)
    return report


def _price(
    report: UtilReport, allocated: list[Series], used: list[Series], prices: dict[str, float], step: float
) -> None:
    idle: dict[tuple[str, str], float] = defaultdict(float)  # (node, jobid) -> allocated - used GPU-hours
    for sign, found in ((1.0, allocated), (-1.0, used)):
        for series in found:
            idle[(series.labels.get("node", "?"), series.labels.get("jobid", "?"))] += sign * _hours(
                series, step, report.end
            )
    for (node, jobid), hours in idle.items():
        price = prices.get(node)
        if price is None:
            continue
        job = report.jobs[jobid]
        job.wasted_usd = (job.wasted_usd or 0.0) + max(hours, 0.0) * price
    for name, usage in report.nodes.items():
        price = prices.get(name)
        if price is None:
            continue
        idle_allocated = max(usage.allocated_gpu_hours - usage.used_gpu_hours, 0.0)
        unallocated = 0.0 if report.job else usage.unallocated_gpu_hours
        usage.wasted_usd = (idle_allocated + unallocated) * price


def _timeline(used: list[Series]) -> list[tuple[float, float]]:
    busy: dict[float, float] = defaultdict(float)
    for series in used:
        for t, value in series.values:
            busy[t] += value
    return sorted(busy.items())


# ---- rendering -----------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: UtilReport, title: str = "GPU utilization") -> str:
    from datetime import UTC, datetime

    def when(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")

    lines = [f"# {title}: {report.cluster}", ""]
    lines.append(
        f"From {when(report.start)} to {when(report.end)} (step {report.step:g} s)"
        + (f", job {report.job}" if report.job else "")
        + "."
    )
    if report.simulated:
        lines += [
            "",
            "**SIMULATED GPUs**: the local backend's stand-in exporter derives SM-active from the CPU use "
            'of the job holding each node (every series is labelled simulated="true").',
        ]
    total = report.total
    lines += [
        "",
        f"- allocated GPU-hours: {total.allocated_gpu_hours:.3f}",
        f"- used GPU-hours (SM-active): {total.used_gpu_hours:.3f}",
        f"- busy ratio: {fmt(total.busy_ratio, '.1%')}",
        "- wasted: "
        + (f"${total.wasted_usd:,.2f}" if total.wasted_usd is not None else "- (no price in the catalog)"),
        "",
        "| node | GPU-hours | allocated | used | busy | wasted $ |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, usage in sorted(report.nodes.items()):
        lines.append(
            f"| {name} | {usage.gpu_hours:.3f} | {usage.allocated_gpu_hours:.3f} "
            f"| {usage.used_gpu_hours:.3f} "
            f"| {fmt(usage.busy_ratio, '.1%')} | {fmt(usage.wasted_usd, ',.2f')} |"
        )
    lines += ["", "| job | allocated GPU-hours | used | busy | wasted $ |", "| --- | --- | --- | --- | --- |"]
    for jobid, usage in sorted(report.jobs.items(), key=_job_key):
        lines.append(
            f"| {jobid} | {usage.allocated_gpu_hours:.3f} | {usage.used_gpu_hours:.3f} "
            f"| {fmt(usage.busy_ratio, '.1%')} | {fmt(usage.wasted_usd, ',.2f')} |"
        )
    return "\n".join(lines) + "\n"


def plot_timeline(report: UtilReport, path: Any) -> None:
    """Busy GPUs (the sum of SM-active over allocated GPUs) over the window, as a PNG."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3))
    if report.timeline:
        times = [(t - report.start) / 60 for t, _ in report.timeline]
        ax.step(times, [v for _, v in report.timeline], where="post")
    ax.set_xlabel("minutes since start")
    ax.set_ylabel("busy GPUs (SM-active)")
    ax.set_title(f"{report.cluster}" + (" (simulated GPUs)" if report.simulated else ""))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


MARKDOWN_NAME = "utilization.md"
JSON_NAME = "utilization.json"
PLOT_NAME = "utilization.png"


def write_report(out_dir: Any, report: UtilReport | None, *, unavailable: str | None = None) -> list[Any]:
    """``utilization.md``, ``utilization.json`` and (with data) ``utilization.png`` in ``out_dir``; with
    ``unavailable`` (why Prometheus could not be read) the two documents say so instead."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import json

    if report is None:
        document: dict[str, Any] = {"available": False, "reason": unavailable}
        text = f"# GPU utilization\n\nNot available: {unavailable}\n"
    else:
        document = {"available": True, **report.to_json()}
        text = render_markdown(report)
    written = [out / JSON_NAME, out / MARKDOWN_NAME]
    written[0].write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    written[1].write_text(text, encoding="utf-8")
    if report is not None:
        plot_timeline(report, out / PLOT_NAME)
        written.append(out / PLOT_NAME)
    return written


@dataclass
class UtilizationSection:
    """The GPU utilization during a validation run, as a section of the validation report (never a
    verdict: ``passed`` is always true)."""

    report: UtilReport | None
    unavailable: str | None = None
    passed: bool = True

    def to_json(self) -> dict[str, Any]:
        if self.report is None:
            return {"available": False, "reason": self.unavailable}
        return {"available": True, **self.report.to_json()}

    def markdown(self) -> list[str]:
        if self.report is None:
            return ["## GPU utilization during the run", "", f"Not available: {self.unavailable}"]
        text = render_markdown(self.report, title="GPU utilization during the run")
        return ["## " + line[2:] if line.startswith("# ") else line for line in text.splitlines()]


def during(inventory: Inventory, start: float, end: float) -> UtilizationSection:
    """The section for ``start``..``end``; Prometheus that cannot be read makes an 'unavailable' section."""
    from gpufleet.monitoring.prometheus import PrometheusUnavailable, prometheus_url

    if not inventory.software.get("monitoring", False):
        return UtilizationSection(
            None, "monitoring is off for this cluster (spec software.monitoring: false)"
        )
    try:
        with prometheus_url(inventory) as url:
            return UtilizationSection(collect(PrometheusClient(url, timeout=20.0), inventory, start, end))
    except PrometheusUnavailable as exc:
        return UtilizationSection(None, exc.message)
