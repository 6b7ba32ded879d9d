"""The validation report: one JSON document, the same in Markdown for people, and a bus-bandwidth plot.

``write_report(out_dir, ...)`` writes ``validation-report.json``, ``validation-report.md`` and
``busbw.png`` side by side. matplotlib is imported only when the plot is drawn (Agg backend, no display).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gpufleet.errors import EnvironmentProblem, writing
from gpufleet.spec.units import about_bytes, format_bytes
from gpufleet.validate.gate import FAIL, PASS, WARN, GateMode, Verdict
from gpufleet.validate.models import TestResult

JSON_NAME = "validation-report.json"
MARKDOWN_NAME = "validation-report.md"
PLOT_NAME = "busbw.png"


class Section(Protocol):
    """Something that joins the report: node health results, bisection results."""

    @property
    def passed(self) -> bool: ...

    def to_json(self) -> dict[str, Any]: ...

    def markdown(self) -> list[str]: ...


# What a validation run writes to its report folder, with room to spare: the logs of each collective and
# of the training job (tens of KB each on the local cluster, a few MB for a 64-node sweep), two plots
# (under 200 KB) and the report itself.
REPORT_ROOM = 16 << 20


def require_room(out_dir: Path, needed: int = REPORT_ROOM) -> None:
    """``EnvironmentProblem`` before a run when the filesystem of ``out_dir`` (or of its nearest folder
    that exists) has less than ``needed`` bytes free: the run's report and logs would be lost at its end."""
    folder = out_dir.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise EnvironmentProblem(
            f"the validation report and logs go to {out_dir}, and the filesystem that holds it ({folder}) "
            f"has {about_bytes(free)} free; a run needs about {about_bytes(needed)} there",
            hint=f"free space there (df -h {folder}), or give --out a folder on another filesystem",
        )


@dataclass(frozen=True)
class ReportFiles:
    json: Path
    markdown: Path
    plot: Path | None


def test_document(test: TestResult, verdict: Verdict) -> dict[str, Any]:
    """One test as ``gpufleet report --json`` prints it: the parsed result plus its verdict."""
    data = test.to_json()
    data["verdict"] = verdict.to_json()
    return data


def build_document(
    tests: list[TestResult],
    verdicts: list[Verdict],
    *,
    sections: dict[str, Section] | None = None,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sections = sections or {}
    passed = all(verdict.passed for verdict in verdicts) and all(s.passed for s in sections.values())
    document: dict[str, Any] = {
        "generated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "passed": passed,
    }
    if context:
        document["context"] = context
    document["tests"] = [test_document(test, verdict) for test, verdict in zip(tests, verdicts, strict=True)]
    for name, section in sections.items():
        document[name] = section.to_json()
    return document


def write_report(
    out_dir: Path,
    tests: list[TestResult],
    verdicts: list[Verdict],
    *,
    sections: dict[str, Section] | None = None,
    context: dict[str, Any] | None = None,
    gate_min_bytes: int | None = None,
) -> ReportFiles:
    out_dir.mkdir(parents=True, exist_ok=True)
    document = build_document(tests, verdicts, sections=sections, context=context)
    plot_path: Path | None = None
    if any(test.rows for test in tests):
        plot_path = out_dir / PLOT_NAME
        with writing("the bus bandwidth plot", plot_path):
            plot_busbw(tests, verdicts, plot_path, gate_min_bytes=gate_min_bytes)
        document["plot"] = PLOT_NAME
    json_path = out_dir / JSON_NAME
    with writing("the validation report", json_path):
        json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    md_path = out_dir / MARKDOWN_NAME
    with writing("the validation report", md_path):
        md_path.write_text(render_markdown(tests, verdicts, document, sections or {}), encoding="utf-8")
    return ReportFiles(json_path, md_path, plot_path)


def append_section(files: ReportFiles, name: str, section: Section) -> None:
    """Add a section to a report already written: ``name`` in the JSON, its Markdown at the end (the GPU
    utilization during the run, measured once the run is over: gpufleet.monitoring.utilization)."""
    document = json.loads(files.json.read_text(encoding="utf-8"))
    document[name] = section.to_json()
    files.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with files.markdown.open("a", encoding="utf-8") as handle:
        handle.write("\n" + "\n".join(section.markdown()) + "\n")


# ---- Markdown -------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return str(value).replace("|", "\\|")


def _measured(verdict: Verdict) -> str:
    if verdict.measured_busbw is None:
        return "-"
    return f"{verdict.measured_busbw:g} GB/s at {format_bytes(verdict.measured_bytes or 0)}"


def _threshold(verdict: Verdict) -> str:
    if verdict.threshold is None:
        return "correctness only"
    if verdict.mode is GateMode.FLOOR:
        return f"floor {verdict.floor:g} GB/s"
    return f"{verdict.threshold:.4g} GB/s ({verdict.mode})"


def _expected(verdict: Verdict) -> str:
    if verdict.expected is None:
        return "-"
    return f"{verdict.expected:.4g} GB/s ({verdict.mode})"


def _bound(verdict: Verdict) -> str:
    if verdict.bound is None:
        return "-"
    return f"{verdict.bound.gbps:.4g} GB/s" + (" (in-network can exceed)" if verdict.bound.in_network else "")


def _transport_cell(test: TestResult, verdict: Verdict) -> str:
    used = test.transport or "not seen"
    return f"{used} (expected {verdict.transport_expected})" if verdict.transport_expected else used


def render_markdown(
    tests: list[TestResult], verdicts: list[Verdict], document: dict[str, Any], sections: dict[str, Section]
) -> str:
    lines = ["# gpufleet validation report", ""]
    lines.append(
        f"**Overall: {'PASS' if document['passed'] else 'FAIL'}** (generated {document['generated']})"
    )
    lines.append("")
    context = document.get("context") or {}
    if context:
        lines.extend(f"- {key}: {_cell(value)}" for key, value in context.items())
        lines.append("")
    lines += [
        "| collective | verdict | measured busbw | expected | pass at | drain below | bound | ranks | hosts "
        "| transport | #wrong | oob | log |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for test, verdict in zip(tests, verdicts, strict=True):
        collective = verdict.collective or "?"
        if test.collective_source == "row shape":
            collective += " (inferred)"
        lines.append(
            "| "
            + " | ".join(
                _cell(value)
                for value in (
                    collective,
                    "PASS" if verdict.passed else f"**{verdict.tier.value.upper()}**",
                    _measured(verdict),
                    _expected(verdict),
                    _threshold(verdict),
                    None if verdict.drain_below is None else f"{verdict.drain_below:.4g} GB/s",
                    _bound(verdict),
                    test.ranks,
                    len(test.hosts) or None,
                    _transport_cell(test, verdict),
                    test.wrong_total,
                    test.out_of_bounds,
                    test.label,
                )
            )
            + " |"
        )
    if any(test.rows for test in tests):
        lines += ["", f"![bus bandwidth against message size]({PLOT_NAME})"]
    for test, verdict in zip(tests, verdicts, strict=True):
        lines += ["", f"## {verdict.collective or 'unknown collective'}: {test.label}", ""]
        lines.append(f"**{verdict.summary}**")
        lines.append("")
        marks = {PASS: "ok", FAIL: "FAIL", WARN: "warn"}
        for check in verdict.checks:
            lines.append(f"- [{marks.get(check.status, 'info')}] {check.name}: {check.message}")
        if verdict.baseline:
            base = verdict.baseline
            versions = ", ".join(f"{k} {v}" for k, v in base["versions"].items() if v)
            lines.append(
                f"- baseline: {base['busbw']:g} GB/s at {format_bytes(base['message_bytes'])} "
                f"{base['placement']} on {base['nodes']} nodes"
                + (f" ({versions})" if versions else "")
                + f", source: {base['title']}"
                + (f" <{base['url']}>" if base["url"] else "")
            )
            if base.get("provider_note"):
                lines.append(f"- another provider's run: {base['provider_note']}")
        if verdict.bound is not None:
            lines.append(f"- physical bound: {verdict.bound.gbps:.4g} GB/s ({verdict.bound.formula})")
            if verdict.bound.in_network:
                lines.append(f"- in-network reduction: {verdict.bound.in_network}")
        if verdict.derived_from:
            lines.append(f"- expected figure: {verdict.derived_from}")
        if verdict.extrapolated:
            lines.append(f"- {verdict.extrapolated}")
        if verdict.rerun_of:
            first = verdict.rerun_of
            lines.append(f"- re-run: first run {first['busbw']} GB/s ({first['tier']}, {first['log']})")
        facts = {
            "test": test.test_name,
            "collective from": test.collective_source,
            "nccl": test.nccl_version,
            "tests": test.tests_version,
            "net plugin": test.net_plugin,
            "avg busbw (as printed)": test.avg_busbw,
        }
        lines.extend(f"- {key}: {value}" for key, value in facts.items() if value is not None)
        lines.extend(f"- note: {note}" for note in test.notes)
        if test.rows:
            lines += [
                "",
                "| size | count | type | redop | root | oop time (us) | oop busbw | oop #wrong | ip busbw "
                "| ip #wrong |",
                "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
            ]
            for row in test.rows:
                oop, ip = row.oop, row.ip
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(value)
                        for value in (
                            format_bytes(row.size) if row.size else 0,
                            row.count,
                            row.type,
                            row.redop,
                            row.root,
                            oop.time_us if oop else None,
                            oop.busbw if oop else None,
                            _wrong_cell(oop),
                            ip.busbw if ip else None,
                            _wrong_cell(ip),
                        )
                    )
                    + " |"
                )
    for section in sections.values():
        lines.append("")
        lines.extend(section.markdown())
    return "\n".join(lines) + "\n"


def _wrong_cell(half: Any) -> str:
    if half is None:
        return "-"
    if half.error is not None:
        return f"err {half.error:g}"
    return "N/A" if half.wrong is None else str(half.wrong)


# ---- the plot -------------------------------------------------------------------------------------


def _byte_label(value: float, _position: int = 0) -> str:
    if value <= 0:
        return "0"
    exponent = round(math.log2(value))
    if abs(2**exponent - value) > 1e-6 * value:
        return ""
    for suffix, power in (("G", 30), ("M", 20), ("K", 10)):
        if exponent >= power:
            return f"{2 ** (exponent - power)}{suffix}"
    return f"{2**exponent}"


def plot_busbw(
    tests: list[TestResult], verdicts: list[Verdict], path: Path, *, gate_min_bytes: int | None = None
) -> Path:
    """Bus bandwidth (out-of-place) against message size, one line per test, thresholds drawn in.

    A threshold or baseline shared by several tests is drawn once, in grey; one that belongs to a single
    test takes that test's colour. The circled point on each line is the figure its gate judged.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    figure, axes = plt.subplots(figsize=(10, 6), dpi=120)
    names = [verdict.collective or "unknown" for verdict in verdicts]
    repeated = {name for name in names if names.count(name) > 1}
    palette = plt.get_cmap("tab10")
    colors = [palette(index) for index in range(palette.N)]
    sizes: list[int] = []
    marks: dict[tuple[Any, ...], dict[str, Any]] = {}
    for index, (test, verdict) in enumerate(zip(tests, verdicts, strict=True)):
        points = sorted(
            {row.size: row.busbw for row in test.rows if row.size > 0 and row.busbw is not None}.items()
        )
        if not points:
            continue
        color = colors[index % len(colors)]
        label = names[index] + (f" ({Path(test.file).name})" if names[index] in repeated else "")
        label += " - PASS" if verdict.passed else " - FAIL"
        if verdict.passed and verdict.mode is GateMode.CORRECTNESS_ONLY:
            label += " (correctness only)"
        xs, ys = zip(*points, strict=True)
        sizes.extend(xs)
        axes.plot(xs, ys, marker="o", markersize=3, linewidth=1.6, color=color, label=label)
        if verdict.measured_busbw is not None and verdict.measured_bytes is not None:
            axes.plot(
                [verdict.measured_bytes],
                [verdict.measured_busbw],
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgewidth=1.8,
                markeredgecolor="black" if verdict.passed else "red",
                linestyle="none",
            )
        if verdict.threshold is not None:
            base = verdict.baseline
            key = (
                verdict.mode,
                round(verdict.threshold, 6),
                base and base["busbw"],
                base and base["message_bytes"],
            )
            mark = marks.setdefault(key, {"verdict": verdict, "colors": [], "names": []})
            mark["colors"].append(color)
            mark["names"].append(names[index])
            if base:
                sizes.append(base["message_bytes"])
    if not sizes:
        sizes = [1]
    low = max(0, math.floor(math.log2(min(sizes))))
    high = math.ceil(math.log2(max(sizes)))
    start = gate_min_bytes or 2**low
    for mark in marks.values():
        verdict = mark["verdict"]
        shared = len(mark["colors"]) > 1
        shade = "0.3" if shared else mark["colors"][0]
        who = "/".join(sorted(set(mark["names"])))
        kind = "floor" if verdict.mode is GateMode.FLOOR else f"pass at ({verdict.mode})"
        if verdict.bound is not None:
            limit = verdict.bound.gbps
            axes.hlines(limit, start, 2**high, colors=[shade], linestyles="dotted", linewidth=1.0)
            axes.annotate(
                f"{who} bound: {verdict.bound.gbps:.4g}",
                (2**high, verdict.bound.gbps),
                textcoords="offset points",
                xytext=(-4, 3),
                ha="right",
                fontsize=8,
                color=shade,
            )
        axes.hlines(verdict.threshold, start, 2**high, colors=[shade], linestyles="dashed", linewidth=1.2)
        axes.annotate(
            f"{who} {kind}: {verdict.threshold:.4g}",
            (2**high, verdict.threshold),
            textcoords="offset points",
            xytext=(-4, -11),
            ha="right",
            fontsize=8,
            color=shade,
        )
        if verdict.baseline:
            base = verdict.baseline
            axes.plot(
                [base["message_bytes"]],
                [base["busbw"]],
                marker="*",
                markersize=14,
                color=shade,
                markeredgecolor="black",
                linestyle="none",
                label=f"baseline {who}: {base['busbw']:g} GB/s, {base['nodes']} nodes",
            )
    if gate_min_bytes:
        axes.axvspan(gate_min_bytes, 2 ** (high + 0.5), color="0.93", zorder=0)
        axes.text(
            gate_min_bytes,
            0.99,
            f" judged at >= {format_bytes(gate_min_bytes)}",
            transform=axes.get_xaxis_transform(),
            va="top",
            fontsize=8,
            color="0.35",
        )
    axes.set_xscale("log", base=2)
    step = max(1, math.ceil((high - low + 1) / 18))
    axes.xaxis.set_major_locator(FixedLocator([2.0**k for k in range(low, high + 1, step)]))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.xaxis.set_major_formatter(FuncFormatter(_byte_label))
    axes.set_xlim(2 ** (low - 0.5), 2 ** (high + 0.5))
    for tick in axes.get_xticklabels():
        tick.set_rotation(45)
    axes.set_xlabel("message size (bytes, log2 scale)")
    axes.set_ylabel("bus bandwidth, out-of-place (GB/s)")
    overall = "PASS" if all(verdict.passed for verdict in verdicts) else "FAIL"
    axes.set_title(f"nccl-tests bus bandwidth - {overall} (circled: the figure each gate judged)")
    axes.set_ylim(bottom=0)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(loc="upper left", fontsize=8, framealpha=0.9)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
