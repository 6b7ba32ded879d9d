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
from gpufleet.cli.common import JsonOpt, SpecArg, console, err_console, print_json
from gpufleet.errors import ExitCode, GpufleetError
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.bake.result import BakeResult
    from gpufleet.configure.runner import PlayResult
    from gpufleet.inventory.model import Inventory
    from gpufleet.lifecycle.teardown import Teardown
    from gpufleet.state import ClusterState
    from gpufleet.validate.gate import Verdict
    from gpufleet.validate.suite import SuiteResult

OutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", help="report folder (default: reports/<cluster>-<UTC time>/ in the current folder)"
    ),
]


def default_out(spec: ClusterSpec) -> Path:
    return Path("reports") / f"{spec.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def run_validation(
    spec: ClusterSpec, out: Path, json_out: bool, verbose: bool, ledger: Path | None = None
) -> bool:
    """Run the suite on the cluster, print its verdicts; return whether it passed."""
    result = pipeline.validate(spec, out, cluster_cmd.reporter_for(json_out, verbose), ledger=ledger)
    render_validation(spec, result, json_out, verbose)
    return result.passed


# The console's verdict table fits an 80-column terminal; the reasons fold inside their column, and host
# names are printed whole on their own lines above it.
CONSOLE_WIDTH = 80


def _node_failures(result: SuiteResult) -> list[str]:
    """What failed on which node, to print first: the bisection's nodes, then the unhealthy ones."""
    lines = []
    if result.bisection is not None:
        lines += [f"{node}: {why}" for node, why in result.bisection.bad_nodes.items()]
    if result.health is not None:
        for node in result.health.nodes:
            if not node.passed:
                why = "; ".join(c.message for c in node.checks if c.status.value == "fail") or "unhealthy"
                lines.append(f"{node.node}: {why}")
    return lines


def render_validation(spec: ClusterSpec, result: SuiteResult, json_out: bool, verbose: bool = False) -> None:
    if json_out:
        print_json(json.loads(result.report.json.read_text()))
        return
    if verbose:
        for run in result.runs:
            console.rule(f"{run.collective} on {len(run.nodes)} node(s)")
            console.print(escape(run.command), style="dim", soft_wrap=True)
            table_lines = [line for line in run.log.splitlines() if not line.startswith("#  Rank")]
            console.print(escape("\n".join(table_lines)), soft_wrap=True, highlight=False)
    if not result.passed:
        for line in _node_failures(result):
            console.print(f"[bold red]FAIL[/] {escape(line)}", soft_wrap=True)
    console.print(verdict_table(spec.name, result.verdicts))
    for line in result.taken_out.lines() if result.taken_out is not None else []:
        console.print(f"[red]{escape(line)}[/]", soft_wrap=True)
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
    console.print("report: " + ", ".join(escape(str(path)) for path in files), soft_wrap=True)
    if not verbose:
        logs = escape(str(result.report.json.parent / "logs"))
        console.print(f"srun lines and nccl-tests tables: {logs}/ (--verbose prints them)", soft_wrap=True)
    console.print("[green]validation passed[/]" if result.passed else "[bold red]validation failed[/]")


_WORDS = {"pass": "[green]PASS[/]", "warn": "[yellow]WARN[/]", "fail": "[bold red]FAIL[/]"}


def verdict_table(name: str, verdicts: list[Verdict]) -> Table:
    """collective, verdict, measured, expected, bound, why: in 80 columns, the why folded."""
    table = Table(title=f"validation of {name}", width=min(CONSOLE_WIDTH, console.width), show_lines=True)
    table.add_column("collective", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for column in ("measured", "expected", "bound"):
        table.add_column(column, overflow="fold", max_width=10)
    table.add_column("why", overflow="fold", ratio=1)
    for verdict in verdicts:
        word = _WORDS[verdict.tier.value] if not verdict.passed else _WORDS["pass"]
        if verdict.rerun_of and verdict.passed:
            word += " (re-run)"
        measured = "-" if verdict.measured_busbw is None else f"{verdict.measured_busbw:.4g} GB/s"
        expected = "-" if verdict.expected is None else f"{verdict.expected:.4g} GB/s"
        bound = "-" if verdict.bound is None else f"{verdict.bound.gbps:.4g} GB/s"
        table.add_row(verdict.collective or "?", word, measured, expected, bound, escape(verdict.why))
    return table


LedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="the ledger of this site's runs (JSON lines) to read and append to (default: "
        "$GPUFLEET_LEDGER, else ledger.jsonl in the state folder)",
    ),
]


def validate(
    spec_path: SpecArg,
    json_out: JsonOpt = False,
    out: OutOpt = None,
    verbose: cluster_cmd.VerboseOpt = False,
    ledger: LedgerOpt = None,
) -> None:
    """Run the validation suite (health, collectives through Slurm or as MPIJobs, gate, report); 1 on FAIL."""
    spec = load_spec(spec_path)
    passed = run_validation(spec, out or default_out(spec), json_out, verbose, ledger)
    if not passed:
        raise typer.Exit(ExitCode.FAILED)


class _RunPrinter(pipeline.RunView):
    """``gpufleet run``'s view: each step printed as it ends, as its own command prints it."""

    def __init__(
        self, spec: ClusterSpec, spec_path: Path, slow_target: str | None, verbose: bool = False
    ) -> None:
        self.spec = spec
        self.spec_path = spec_path
        self.slow_target = slow_target
        self.verbose = verbose

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
        render_validation(self.spec, result, json_out=False, verbose=self.verbose)

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
    ledger: LedgerOpt = None,
) -> None:
    """The whole job: up, configure, validate and report, then down (also when a step fails)."""
    spec = load_spec(spec_path)
    out = out or default_out(spec)
    target = None
    if slow_node:
        from gpufleet.infra.local.faults import slow_node_target

        target = slow_node_target(spec)  # refuses a spec that cannot show it, before anything is made
    view = _RunPrinter(spec, spec_path, target, verbose)
    run_result = pipeline.run(
        spec,
        out,
        cluster_cmd.reporter_for(False, verbose),
        spec_path=spec_path,
        keep=keep,
        bake=bake,
        replace=replace,
        view=view,
        ledger=ledger,
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
