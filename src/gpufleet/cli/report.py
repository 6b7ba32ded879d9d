"""``gpufleet report LOG...``: read nccl-tests logs, judge them, print (and write) the report.

A log can come from anywhere: a file gpufleet wrote, an nccl-tests ``-J`` JSON report, or output pasted
into a file (``-`` reads standard input). Exit code 0 when every test passes its gate, 1 when one fails,
6 when a log cannot be read.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.catalog import load_catalog
from gpufleet.cli.common import JsonOpt, console, err_console, print_json
from gpufleet.errors import ExitCode, LogParseError
from gpufleet.spec.model import Collective, FabricKind
from gpufleet.spec.units import format_bytes, parse_bytes
from gpufleet.validate.gate import FAIL, PASS, WARN, GateConfig, Verdict, judge_all
from gpufleet.validate.models import TestResult
from gpufleet.validate.nccl_log import parse_log
from gpufleet.validate.report import test_document, write_report

_STYLES = {PASS: "green", FAIL: "bold red", WARN: "yellow"}


def _floors(values: list[str]) -> dict[str, float]:
    floors: dict[str, float] = {}
    names = [c.value for c in Collective]
    for value in values:
        name, sep, number = value.partition("=")
        name = name.strip()
        try:
            floor = float(number)
        except ValueError:
            floor = -1.0
        if not sep or name not in names or floor <= 0:
            raise typer.BadParameter(
                f"'{value}': expected COLLECTIVE=GBPS with a positive number, e.g. all_reduce=350; "
                f"collectives: {', '.join(names)}",
                param_hint="--min-busbw",
            )
        floors[name] = floor
    return floors


def _size(value: str) -> int:
    try:
        return parse_bytes(value)
    except ValueError:
        raise typer.BadParameter(
            f"'{value}': expected a size such as 1G or 512M", param_hint="--gate-min-bytes"
        ) from None


def report(
    logs: Annotated[
        list[str],
        typer.Argument(
            help="nccl-tests logs (text or -J JSON); '-' reads standard input", show_default=False
        ),
    ],
    json_out: JsonOpt = False,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="catalog instance type, e.g. p5.48xlarge (baseline)")
    ] = None,
    nodes: Annotated[
        int | None, typer.Option("--nodes", min=1, help="nodes in the run (default: counted from the log)")
    ] = None,
    fabric: Annotated[
        FabricKind | None, typer.Option("--fabric", help="the fabric NCCL should have used (transport check)")
    ] = None,
    margin: Annotated[
        float, typer.Option("--margin", min=0.01, max=1.5, help="pass at this fraction of the baseline")
    ] = 0.9,
    min_busbw: Annotated[
        list[str] | None,
        typer.Option(
            "--min-busbw", help="explicit floor COLLECTIVE=GBPS (repeatable); overrides the baseline"
        ),
    ] = None,
    gate_min_bytes: Annotated[
        str, typer.Option("--gate-min-bytes", help="judge busbw on rows at least this large")
    ] = "1G",
    collective: Annotated[
        Collective | None,
        typer.Option("--collective", help="the collective, for logs that do not name it"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="write validation-report.{json,md} and busbw.png here")
    ] = None,
    allow_incomplete: Annotated[
        bool,
        typer.Option(
            "--allow-incomplete",
            help="judge a log that stops before its summary lines (an excerpt) instead of failing it",
        ),
    ] = False,
) -> None:
    """Parse nccl-tests LOGs, judge each test, print the verdict. Exits 1 when a test fails its gate,
    6 when a log cannot be read (the others are still judged and reported)."""
    config = GateConfig(
        gate_min_bytes=_size(gate_min_bytes),
        margin=margin,
        min_busbw=_floors(min_busbw or []),
        instance_type=_instance_type(instance_type),
        nodes=nodes,
        fabric=fabric,
        collective=collective.value if collective else None,
        require_complete=not allow_incomplete,
    )
    tests: list[TestResult] = []
    unreadable: list[LogParseError] = []
    for log in logs:
        try:
            tests.extend(parse_log(sys.stdin, name="<stdin>") if log == "-" else parse_log(Path(log)))
        except LogParseError as exc:
            unreadable.append(exc)
    if unreadable and len(unreadable) == len(logs):
        raise unreadable[0]  # nothing to report: the error itself (its JSON document with --json)
    verdicts = judge_all(tests, config)
    passed = all(verdict.passed for verdict in verdicts) and not unreadable
    files = None
    if out is not None:
        files = write_report(out, tests, verdicts, gate_min_bytes=config.gate_min_bytes)
    if json_out:
        document = {
            "passed": passed,
            "tests": [test_document(test, verdict) for test, verdict in zip(tests, verdicts, strict=True)],
            "unreadable": [{"message": exc.message, "hint": exc.hint} for exc in unreadable],
        }
        if files:
            document["files"] = {
                "json": str(files.json),
                "markdown": str(files.markdown),
                "plot": str(files.plot),
            }
        print_json(document)
    else:
        for test, verdict in zip(tests, verdicts, strict=True):
            _print_test(test, verdict)
        if files:
            console.print(
                f"report written: {files.markdown}, {files.json}" + (f", {files.plot}" if files.plot else "")
            )
        for problem in unreadable:
            err_console.print(f"[bold red]unreadable:[/] {escape(problem.message)}", soft_wrap=True)
        word = "[green]PASS[/]" if passed else "[bold red]FAIL[/]"
        count = f"{sum(v.passed for v in verdicts)} of {len(verdicts)} test(s) passed"
        if unreadable:
            count += f"; {len(unreadable)} of {len(logs)} log(s) could not be read"
        console.print(f"{word}: {count}")
    if unreadable:
        raise typer.Exit(ExitCode.VALIDATE)
    if not passed:
        raise typer.Exit(ExitCode.FAILED)


def _instance_type(name: str | None) -> str | None:
    """A catalog type, or a usage error with the close matches: a typo must not turn the gate off."""
    if name is None:
        return None
    catalog = load_catalog()
    if catalog.get(name) is not None:
        return name
    known = sorted(name for name, item in catalog.instance_types.items() if item.gpu)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise typer.BadParameter(
        f"'{name}' is not in gpufleet's catalog, so it has no baseline; {hint}known GPU types: "
        f"{', '.join(known)} (docs/catalog.md)",
        param_hint="--instance-type",
    )


def _print_test(test: TestResult, verdict: Verdict) -> None:
    name = verdict.collective or "unknown collective"
    if test.collective_source == "row shape":
        name += " (inferred)"
    facts = [
        f"ranks {test.ranks if test.ranks is not None else '?'}",
        f"hosts {len(test.hosts) or '?'}" + ("+" if test.devices_elided else ""),
        f"transport {test.transport or '?'}",
        f"avg busbw {test.avg_busbw if test.avg_busbw is not None else '?'}",
        f"oob {test.out_of_bounds if test.out_of_bounds is not None else '?'}",
        f"#wrong {test.wrong_total if test.wrong_total is not None else 'N/A'}",
    ]
    shapes = sorted(
        {(row.type, row.redop or "-", "-" if row.root is None else str(row.root)) for row in test.rows}
    )
    shape = "; ".join(f"{kind} {redop} root {root}" for kind, redop, root in shapes[:3])
    title = f"{escape(name)}: {escape(test.label)}" + (f"\n{escape(shape)}" if shape else "")
    table = Table(title=title, caption=escape(", ".join(facts)))
    table.add_column("size", justify="right")
    for half in ("oop", "ip"):
        table.add_column(f"{half} time us", justify="right")
        table.add_column(f"{half} busbw GB/s", justify="right")
        table.add_column(f"{half} #wrong", justify="right")
    for row in test.rows:
        cells = [format_bytes(row.size)]
        for result in (row.oop, row.ip):
            if result is None:
                cells += ["-", "-", "-"]
                continue
            wrong = f"err {result.error:g}" if result.error is not None else _text(result.wrong, "N/A")
            if result.wrong:
                wrong = f"[bold red]{wrong}[/]"
            cells += [f"{result.time_us:g}", f"{result.busbw:g}", wrong]
        table.add_row(*cells)
    console.print(table)
    for check in verdict.checks:
        style = _STYLES.get(check.status, "dim")
        console.print(
            f"  [{style}]{check.status:>4}[/] {check.name}: {escape(check.message)}", soft_wrap=True
        )
    style = "green" if verdict.passed else "bold red"
    console.print(f"[{style}]{escape(verdict.summary)}[/]", soft_wrap=True)
    console.print()


def _text(value: object, none: str = "-") -> str:
    return none if value is None else str(value)
