"""``gpufleet validate SPEC`` and ``gpufleet run SPEC`` (up, configure, validate, report, down)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli import cluster as cluster_cmd
from gpufleet.cli import image as image_cmd
from gpufleet.cli.common import JsonOpt, SpecArg, console, err_console, print_json, read_spec
from gpufleet.errors import ExitCode, GpufleetError
from gpufleet.spec.model import ClusterSpec
from gpufleet.spec.units import format_bytes

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", help="report folder (default: reports/<cluster>-<UTC time>/ in the current folder)"
    ),
]


def default_out(spec: ClusterSpec) -> Path:
    return Path("reports") / f"{spec.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def run_validation(spec: ClusterSpec, out: Path, json_out: bool, verbose: bool) -> bool:
    """Run the suite on the cluster, print its tables and verdicts; return whether it passed."""
    from gpufleet.configure.remote import SshExecutor
    from gpufleet.validate.suite import run_suite

    state, inventory = cluster_cmd.load_inventory(spec)
    reporter = cluster_cmd.reporter_for(json_out, verbose)
    with reporter.step(f"validate: {', '.join(c.value for c in spec.validation.collectives)} through Slurm"):
        result = run_suite(spec, inventory, SshExecutor.login(inventory), out)
    state.mark("validate", "passed" if result.passed else "failed", report=str(out.resolve()))
    if json_out:
        print_json(json.loads(result.report.json.read_text()))
        return result.passed
    for run in result.runs:
        console.rule(f"{run.collective} on {len(run.nodes)} node(s)")
        console.print(escape(run.command), style="dim", soft_wrap=True)
        table_lines = [line for line in run.log.splitlines() if not line.startswith("#  Rank")]
        console.print(escape("\n".join(table_lines)), soft_wrap=True, highlight=False)
    verdicts = Table(title=f"validation of {spec.name}")
    for column in ("collective", "verdict", "busbw judged", "needs", "why"):
        verdicts.add_column(column, overflow="fold")
    for verdict in result.verdicts:
        word = "[green]PASS[/]" if verdict.passed else "[bold red]FAIL[/]"
        judged = "-"
        if verdict.measured_busbw is not None and verdict.measured_bytes is not None:
            judged = f"{verdict.measured_busbw:g} GB/s at {format_bytes(verdict.measured_bytes)}"
        needs = verdict.mode
        if verdict.threshold is not None:
            needs = f"{verdict.threshold:g} GB/s ({verdict.mode})"
        why = "; ".join(check.message for check in verdict.failures) or "-"
        verdicts.add_row(verdict.collective or "?", word, judged, needs, escape(why))
    console.print(verdicts)
    if result.health is not None and not result.health.passed:
        console.print(f"[red]unhealthy nodes:[/] {', '.join(result.health.failed_nodes)}")
    if result.bisection is not None and result.bisection.bad_nodes:
        console.print(f"[red]bad nodes:[/] {', '.join(result.bisection.bad_nodes)}")
    files = [result.report.markdown, result.report.json] + (
        [result.report.plot] if result.report.plot else []
    )
    console.print("report: " + ", ".join(escape(str(path)) for path in files))
    console.print("[green]validation passed[/]" if result.passed else "[bold red]validation failed[/]")
    return result.passed


def validate(
    spec_path: SpecArg, json_out: JsonOpt = False, out: OutOpt = None, verbose: cluster_cmd.VerboseOpt = False
) -> None:
    """Run the validation suite (health checks, collectives through Slurm, gate, report). Exits 1 on FAIL."""
    spec = read_spec(spec_path)
    passed = run_validation(spec, out or default_out(spec), json_out, verbose)
    if not passed:
        raise typer.Exit(ExitCode.FAILED)


def run(
    spec_path: SpecArg,
    out: OutOpt = None,
    keep: Annotated[bool, typer.Option("--keep", help="leave the cluster up afterwards")] = False,
    bake: Annotated[
        bool,
        typer.Option(
            "--bake/--no-bake",
            help="local: first bake the roles' install phase into a node image if none matches",
        ),
    ] = True,
    verbose: cluster_cmd.VerboseOpt = False,
) -> None:
    """The whole job: up, configure, validate and report, then down (also when a step fails)."""
    spec = read_spec(spec_path)
    out = out or default_out(spec)
    passed = False
    if bake and spec.provider.kind == "local":
        image_cmd.build(spec_path, rebuild=False, json_out=False, verbose=verbose)
    try:
        cluster_cmd.up(spec_path, json_out=False, verbose=verbose)
        cluster_cmd.configure(spec_path, json_out=False, verbose=verbose)
        passed = run_validation(spec, out, json_out=False, verbose=verbose)
    finally:
        if keep:
            console.print(f"cluster {spec.name} left up (--keep); remove it with: gpufleet down {spec_path}")
        else:
            try:
                cluster_cmd.down(spec_path, json_out=False, verbose=verbose)
            except GpufleetError as exc:
                err_console.print(f"[bold red]teardown failed:[/] {escape(str(exc))}")
                raise
    if not passed:
        raise typer.Exit(ExitCode.FAILED)
