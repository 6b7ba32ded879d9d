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
Every scrape counts, whatever the window: each range-query point is a subquery
``sum_over_time((EXPR)[<step>:<scrape interval>])``, the sum of EXPR evaluated at every multiple of the
scrape interval in the ``step`` before the point, and the points' windows tile the window once
(``Windows``); GPU-hours = that sum x the scrape interval. The step (a multiple of the scrape interval,
``prometheus.step_for`` or more) only sets how many points come back, under Prometheus's 11,000.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpufleet.catalog import load_catalog
from gpufleet.inventory.model import Inventory
from gpufleet.monitoring import metrics as m
from gpufleet.monitoring.prometheus import (
    PrometheusClient,
    PrometheusUnavailable,
    Series,
    format_duration_ms,
    parse_duration_ms,
    step_for,
)

ALLOCATED = f"max by (jobid, node, gpu) ({m.JOB_GPU})"
USED = f"{ALLOCATED} * on (node, gpu) group_left () max by (node, gpu) ({m.SM_ACTIVE})"
CAPACITY = f"count by (node) (max by (node, gpu) ({m.SM_ACTIVE}))"
SIMULATED = f'count ({m.SM_ACTIVE}{{simulated="true"}})'


SCRAPE_INTERVAL_VAR = "monitoring_scrape_interval"


def role_setting(inventory: Inventory, name: str) -> tuple[Any, str]:
    """The monitoring role's variable ``name`` as the cluster runs it: the inventory's where it sets one,
    else the role's default (roles/monitoring/defaults/main.yml); and where it came from."""
    value = inventory.extra_vars.get(name)
    if value is not None:
        return value, f"the inventory's {name}"
    from gpufleet.paths import project_root

    defaults = project_root() / "roles" / "monitoring" / "defaults" / "main.yml"
    return (yaml.safe_load(defaults.read_text(encoding="utf-8")) or {}).get(name), f"{name} in {defaults}"


def idle_alert(inventory: Inventory) -> str:
    """When GpuAllocatedIdle fires on this cluster, in words (its window, threshold and delay): the rules
    average SM-active over ``monitoring_rules_window``, and the alert waits
    ``monitoring_alert_for.gpu_idle`` with the average below ``idle_below``, so a GPU that was busy is
    reported idle that long after it stops."""
    window, _ = role_setting(inventory, "monitoring_rules_window")
    delay = (role_setting(inventory, "monitoring_alert_for")[0] or {}).get("gpu_idle")
    below = (role_setting(inventory, "monitoring_thresholds")[0] or {}).get("idle_below")
    try:
        ms = parse_duration_ms(str(window)) + parse_duration_ms(str(delay))
        total = f"{ms // 60_000}m" if ms % 60_000 == 0 else format_duration_ms(ms)
    except ValueError:
        total = f"{window} + {delay}"
    return (
        f"alert GpuAllocatedIdle: an allocated GPU whose SM-active, averaged over {window}, stays below "
        f"{below} for {delay}; a GPU that was busy is reported about {total} after it went idle (the "
        "'now' column reads the last scrape)"
    )


def scrape_interval(inventory: Inventory) -> float:
    """Seconds between two scrapes of the cluster's Prometheus: the inventory's ``monitoring_scrape_interval``
    where it sets one, else the monitoring role's default (roles/monitoring/defaults/main.yml)."""
    value, source = role_setting(inventory, SCRAPE_INTERVAL_VAR)
    try:
        ms = parse_duration_ms(str(value))
    except ValueError as exc:
        ms, detail = 0, str(exc)
    else:
        detail = f"{value!r} is under 2 ms"
    if ms < 2:
        raise PrometheusUnavailable(
            f"{source} cannot be read as Prometheus's scrape interval: {detail}",
            hint=f"set {SCRAPE_INTERVAL_VAR} to a Prometheus duration such as 15s (docs/monitoring.md)",
        )
    return ms / 1000.0


@dataclass(frozen=True)
class Windows:
    """[start, end] cut into windows, one per point, so that every multiple of the scrape interval in
    (start, end] lies in exactly one window. Those multiples are where Prometheus evaluates a subquery's
    inner expression: it starts at the first multiple of the resolution at or after ``t - range`` and steps
    by the resolution up to ``t`` (promql/engine.go, case *parser.SubqueryExpr: "aligned with the step
    (multiple of 'newEv.interval')", prometheus/prometheus, read 2026-11-24). Prometheus 2.x includes a
    sample on the range's lower bound, 3.0 excludes it (CHANGELOG 3.0.0, "Range selectors and the lookback
    delta are now left-open", #13904), so every point is evaluated half a resolution after a multiple
    (``_offset``): no multiple ever lies on a bound, and both versions see the same samples.

    The range query's points (``full`` windows of ``step``) end at the last multiple in (start, end];
    the ``head`` multiples before them (fewer than a step's) are one instant query."""

    resolution_ms: int
    step_ms: int
    first: int  # index (multiple of the resolution) of the first sample inside (start, end]
    last: int  # and of the last
    full: int
    head: int

    @classmethod
    def over(cls, start: float, end: float, resolution: float) -> Windows:
        res = max(round(resolution * 1000), 2)
        step = math.ceil(step_for(start, end) * 1000 / res) * res
        first = math.floor(round(start * 1000) / res) + 1
        last = math.floor(round(end * 1000) / res)
        count = max(last - first + 1, 0)
        return cls(res, step, first, last, count // (step // res), count % (step // res))

    @property
    def resolution(self) -> float:
        return self.resolution_ms / 1000.0

    @property
    def empty(self) -> bool:
        """No multiple of the scrape interval in (start, end] (a window shorter than one scrape)."""
        return not (self.full or self.head)

    @property
    def step(self) -> float:
        return self.step_ms / 1000.0

    @property
    def _offset(self) -> int:
        return self.resolution_ms // 2

    def expr(self, inner: str, range_ms: int) -> str:
        window, resolution = format_duration_ms(range_ms), format_duration_ms(self.resolution_ms)
        return f"sum_over_time(({inner})[{window}:{resolution}])"

    def integrate(self, client: PrometheusClient, inner: str) -> list[Series]:
        """Per series of ``inner``: (window start, the sum of its samples in the window), in time order."""
        found: dict[tuple[tuple[str, str], ...], Series] = {}
        queries: list[tuple[list[Series], int]] = []
        if self.head:
            at = (self.first + self.head - 1) * self.resolution_ms + self._offset
            queries.append(
                (client.query(self.expr(inner, self.head * self.resolution_ms), at / 1000), self.head)
            )
        if self.full:
            end = self.last * self.resolution_ms + self._offset
            begin = end - (self.full - 1) * self.step_ms
            found_range = client.query_range(
                self.expr(inner, self.step_ms), begin / 1000, end / 1000, self.step
            )
            queries.append((found_range, self.step_ms // self.resolution_ms))
        for result, samples in queries:
            for series in result:
                key = tuple(sorted(series.labels.items()))
                merged = found.setdefault(key, Series(dict(series.labels), []))
                for t, value in series.values:
                    window_end = round(t * 1000) - self._offset
                    merged.values.append(((window_end - samples * self.resolution_ms) / 1000, value))
        return list(found.values())

    def at_end(self, client: PrometheusClient, inner: str, end: float) -> list[Series]:
        """Per series of ``inner``: its value at the last multiple of the scrape interval in (start, end]
        (the sample the windows count last; ``inner`` at ``end`` itself where no multiple is inside).
        A series that ended before (a job gone, marked stale by its exporter's next scrape) is absent."""
        if self.empty:
            return client.query(inner, end)
        at = self.last * self.resolution_ms + self._offset
        return client.query(self.expr(inner, self.resolution_ms), at / 1000)

    def seconds(self, window_start: float) -> float:
        """How long the window starting at ``window_start`` is (the head's is shorter than a step)."""
        if self.head and round(window_start * 1000) == (self.first - 1) * self.resolution_ms:
            return self.head * self.resolution
        return self.step


def _hours(series: Series, resolution: float) -> float:
    """GPU-hours of a 0..1 (or count) series integrated by ``Windows``: every sample stands for one scrape
    interval."""
    return sum(value for _t, value in series.values) * resolution / 3600.0


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
    resolution: float = 15.0  # the scrape interval: every sample Prometheus took at it counts
    nodes: dict[str, NodeUsage] = field(default_factory=dict)
    jobs: dict[str, Usage] = field(default_factory=dict)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (time, busy GPUs)
    job: str | None = None
    # node -> "idle", "busy" or "not allocated" at the window's end (its last scrape, no average)
    now: dict[str, str] = field(default_factory=dict)
    idle_alert: str = ""  # when GpuAllocatedIdle fires here (``idle_alert``)

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
            "resolution_seconds": self.resolution,
            "job": self.job,
            "simulated": self.simulated,
            "total": self.total.to_json(),
            "nodes": {
                name: {**usage.to_json(), "now": self.now.get(name)}
                for name, usage in sorted(self.nodes.items())
            },
            "idle_alert": self.idle_alert,
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
    windows = Windows.over(start, end, scrape_interval(inventory))
    res = windows.resolution
    selector = f'{{jobid="{job}"}}' if job else ""
    allocated = windows.integrate(client, ALLOCATED.replace(m.JOB_GPU, m.JOB_GPU + selector))
    used = windows.integrate(client, USED.replace(m.JOB_GPU, m.JOB_GPU + selector))
    capacity = [] if job else windows.integrate(client, CAPACITY)
    if windows.empty:  # nothing to integrate; the instant query still proves Prometheus answers
        simulated = bool(client.query(SIMULATED, end))
    else:
        simulated = bool(windows.integrate(client, SIMULATED))
    prices = node_prices(inventory)
    report = UtilReport(inventory.cluster, start, end, windows.step, simulated, resolution=res, job=job)
    for host in inventory.compute:
        report.nodes[host.name] = NodeUsage(price_per_gpu_hour=prices.get(host.name))
    for series in capacity:
        report.nodes.setdefault(series.labels.get("node", "?"), NodeUsage()).gpu_hours += _hours(series, res)
    for kind, found in (("allocated", allocated), ("used", used)):
        for series in found:
            node, jobid = series.labels.get("node", "?"), series.labels.get("jobid", "?")
            hours = _hours(series, res)
            for usage in (report.nodes.setdefault(node, NodeUsage()), report.jobs.setdefault(jobid, Usage())):
                setattr(usage, f"{kind}_gpu_hours", getattr(usage, f"{kind}_gpu_hours") + hours)
    _price(report, allocated, used, prices, res)
    report.timeline = _timeline(used, windows)
    report.idle_alert = idle_alert(inventory)
    below = float((role_setting(inventory, "monitoring_thresholds")[0] or {}).get("idle_below", 0.05))
    report.now = _now(
        windows.at_end(client, ALLOCATED.replace(m.JOB_GPU, m.JOB_GPU + selector), end),
        windows.at_end(client, USED.replace(m.JOB_GPU, m.JOB_GPU + selector), end),
        list(report.nodes),
        below,
    )
    return report


def _now(allocated: list[Series], used: list[Series], nodes: list[str], below: float) -> dict[str, str]:
    """Per node, from ``allocated`` and ``used`` at the window's end (``Windows.at_end``, the last
    scrape): its allocated GPUs' SM-active over the GPUs held, "idle" below ``below`` or "busy"; "not
    allocated" where no job holds a GPU of it then (every job gone before the end reads so, whatever it did
    earlier in the window). Right after busy work a node reads idle here well before the rules' average
    says so."""
    held: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    for found, into in ((allocated, held), (used, busy)):
        for series in found:
            for _t, value in series.values:
                into[series.labels.get("node", "?")] += value
    now = {}
    for node in nodes:
        if held.get(node, 0.0) <= 0:
            now[node] = "not allocated"
        else:
            now[node] = "idle" if busy.get(node, 0.0) / held[node] < below else "busy"
    return now


def _price(
    report: UtilReport, allocated: list[Series], used: list[Series], prices: dict[str, float], res: float
) -> None:
    idle: dict[tuple[str, str], float] = defaultdict(float)  # (node, jobid) -> allocated - used GPU-hours
    for sign, found in ((1.0, allocated), (-1.0, used)):
        for series in found:
            idle[(series.labels.get("node", "?"), series.labels.get("jobid", "?"))] += sign * _hours(
                series, res
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


def _timeline(used: list[Series], windows: Windows) -> list[tuple[float, float]]:
    """(window start, busy GPUs averaged over the window): each value holds until the next window."""
    busy: dict[float, float] = defaultdict(float)
    for series in used:
        for t, value in series.values:
            busy[t] += value * windows.resolution / windows.seconds(t)
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
        f"From {when(report.start)} to {when(report.end)} (every {report.resolution:g} s scrape counted, "
        f"{report.step:g} s per point)" + (f", job {report.job}" if report.job else "") + "."
    )
    if report.simulated:
        lines += [
            "",
            "**SIMULATED GPUs**: the local backend's stand-in exporter derives SM-active from the CPU use "
            'of the job holding each node (every series is labelled simulated="true").',
        ]
    total = report.total
    if report.idle_alert:
        lines += ["", report.idle_alert + "."]
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
    for jobid, job_usage in sorted(report.jobs.items(), key=_job_key):
        lines.append(
            f"| {jobid} | {job_usage.allocated_gpu_hours:.3f} | {job_usage.used_gpu_hours:.3f} "
            f"| {fmt(job_usage.busy_ratio, '.1%')} | {fmt(job_usage.wasted_usd, ',.2f')} |"
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
