"""``gpufleet validate SPEC`` and ``gpufleet run SPEC`` (up, configure, validate, report, down)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet import pipeline
from gpufleet.cli import cluster as cluster_cmd
from gpufleet.cli.common import JsonOpt, SpecArg, console, err_console, print_json, read_spec
from gpufleet.errors import ExitCode, GpufleetError
from gpufleet.spec.model import ClusterSpec
from gpufleet.spec.units import format_bytes

if TYPE_CHECKING:
    from gpufleet.bake.result import BakeResult
    from gpufleet.configure.runner import PlayResult
    from gpufleet.inventory.model import Inventory
    from gpufleet.lifecycle.teardown import Teardown
    from gpufleet.state import ClusterState
    from gpufleet.validate.suite import SuiteResult

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
    result = pipeline.validate(spec, out, cluster_cmd.reporter_for(json_out, verbose))
    render_validation(spec, result, json_out)
    return result.passed


def render_validation(spec: ClusterSpec, result: SuiteResult, json_out: bool) -> None:
    if json_out:
        print_json(json.loads(result.report.json.read_text()))
        return
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
        needs = verdict.mode.value
        if verdict.threshold is not None:
            needs = f"{verdict.threshold:g} GB/s ({verdict.mode})"
        why = "; ".join(check.message for check in verdict.failures) or "-"
        verdicts.add_row(verdict.collective or "?", word, judged, needs, escape(why))
    console.print(verdicts)
    if result.health is not None and not result.health.passed:
        console.print(f"[red]unhealthy nodes:[/] {', '.join(result.health.failed_nodes)}")
    if result.bisection is not None and result.bisection.bad_nodes:
        console.print(f"[red]bad nodes:[/] {', '.join(result.bisection.bad_nodes)}")
    for line in result.taken_out.lines() if result.taken_out is not None else []:
        console.print(f"[red]{escape(line)}[/]")
    if result.training is not None:
        style = "green" if result.training.passed else "bold red"
        console.print(f"[{style}]{escape(result.training.summary)}[/]")
        for name, value in result.training.figures.items():
            console.print(f"  {escape(name)}: {escape(str(value))}")
        if result.training.stragglers:
            console.print(f"[red]stragglers:[/] {escape(', '.join(result.training.stragglers))}")
    files = [result.report.markdown, result.report.json] + (
        [result.report.plot] if result.report.plot else []
    )
    console.print("report: " + ", ".join(escape(str(path)) for path in files))
    console.print("[green]validation passed[/]" if result.passed else "[bold red]validation failed[/]")


def validate(
    spec_path: SpecArg, json_out: JsonOpt = False, out: OutOpt = None, verbose: cluster_cmd.VerboseOpt = False
) -> None:
    """Run the validation suite (health, collectives through Slurm or as MPIJobs, gate, report); 1 on FAIL."""
    spec = read_spec(spec_path)
    passed = run_validation(spec, out or default_out(spec), json_out, verbose)
    if not passed:
        raise typer.Exit(ExitCode.FAILED)


class _RunPrinter(pipeline.RunView):
    """``gpufleet run``'s view: each step printed as it ends, as its own command prints it."""

    def __init__(self, spec: ClusterSpec, spec_path: Path, slow_target: str | None) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.slow_target = slow_target

    def baked(self, baked: BakeResult) -> None:
        verb = "baked" if baked.built else "already baked (same roles and pins)"
        console.print(escape(baked.image.said(verb)))

    def up(self, state: ClusterState, inventory: Inventory) -> None:
        cluster_cmd.render_up(self.spec, state, inventory, json_out=False)

    def configured(self, result: PlayResult) -> None:
        cluster_cmd.render_configure(self.spec, result, json_out=False)

    def before_validate(self) -> None:
        if self.slow_target is not None:
            from gpufleet.infra.local.faults import DEFAULT_RATE, slow_link

            console.rule(f"slow node: {self.slow_target}'s link capped at {DEFAULT_RATE}")
            console.print(escape(slow_link(self.slow_target)), style="dim")

    def validated(self, result: SuiteResult) -> None:
        render_validation(self.spec, result, json_out=False)

    def down(self, report: Teardown) -> None:
        cluster_cmd.render_down(self.spec, report, json_out=False)

    def teardown_failed(self, error: GpufleetError) -> None:
        err_console.print(f"[bold red]teardown failed:[/] {escape(str(error))}")

    def kept(self) -> None:
        console.print(
            f"cluster {self.spec.name} left up (--keep); remove it with: gpufleet down {self.spec_path}"
        )


def run(
    spec_path: SpecArg,
    out: OutOpt = None,
    keep: Annotated[bool, typer.Option("--keep", help="leave the cluster up afterwards")] = False,
    bake: Annotated[
        bool,
        typer.Option(
            "--bake/--no-bake",
            help="local: first bake the roles' install phase into a node image if none matches (a cloud "
            "bakes with 'gpufleet image build')",
        ),
    ] = True,
    verbose: cluster_cmd.VerboseOpt = False,
    replace: cluster_cmd.ReplaceOpt = False,
    slow_node: Annotated[
        bool,
        typer.Option(
            "--slow-node",
            help="local only: rate-limit one compute node's link before validating; the gate fails and "
            "the bisection finds and drains that node (examples/local-slow-node.yaml)",
        ),
    ] = False,
) -> None:
    """The whole job: up, configure, validate and report, then down (also when a step fails)."""
    spec = read_spec(spec_path)
    out = out or default_out(spec)
    target = None
    if slow_node:
        from gpufleet.infra.local.faults import slow_node_target

        target = slow_node_target(spec)  # refuses a spec that cannot show it, before anything is made
    view = _RunPrinter(spec, spec_path, target)
    run_result = pipeline.run(
        spec,
        out,
        cluster_cmd.reporter_for(False, verbose),
        spec_path=spec_path,
        keep=keep,
        bake=bake,
        replace=replace,
        view=view,
    )
    passed = run_result.passed
    if target is not None:
        from gpufleet.validate.report import JSON_NAME

        bisection = json.loads((out / JSON_NAME).read_text()).get("bisection") or {}
        named = sorted(bisection.get("bad_nodes") or {})
        caught = not passed and named == [target]
        console.print(
            f"slow-node demo: slowed {target}; the gate {'failed' if not passed else 'passed'}; the "
            f"bisection named {', '.join(named) or 'no node'} in {bisection.get('rounds', 0)} round(s): "
            + ("[green]caught[/]" if caught else "[bold red]not caught[/]")
        )
        if not caught:
            raise typer.Exit(ExitCode.FAILED)
        return
    if not passed:
        raise typer.Exit(ExitCode.FAILED)
