"""``gpufleet up / configure / status / down SPEC``: a cluster's life, one verb each."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet import pipeline
from gpufleet.cli.common import JsonOpt, SpecArg, console, err_console, print_json
from gpufleet.cli.progress import RichReporter
from gpufleet.errors import ExitCode
from gpufleet.infra.adopted import AdoptedStack
from gpufleet.inventory.model import Host, Inventory
from gpufleet.lifecycle.durable_copy import DEFAULT_TIMEOUT_S, DurableCopyOptions
from gpufleet.lifecycle.teardown import Teardown
from gpufleet.preflight import require_no_errors
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.configure.runner import PlayResult

VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="print every step's detail")]


def reporter_for(json_out: bool, verbose: bool) -> RichReporter:
    # With --json, progress goes to stderr so that stdout holds only the JSON document.
    return RichReporter(err_console if json_out else console, verbose=verbose)


ReplaceOpt = Annotated[
    bool,
    typer.Option(
        "--replace",
        help="this spec replaces the one the cluster was made from: what cannot change in place is made "
        "again (the cluster is taken down first, as 'down' does), and a spec from another file with the "
        "cluster's name is accepted",
    ),
]


def up(
    spec_path: SpecArg, json_out: JsonOpt = False, verbose: VerboseOpt = False, replace: ReplaceOpt = False
) -> None:
    """Bring the cluster up (re-runnable: what exists is kept) and write its inventory. A changed spec is
    shown and applied where it changes in place; the rest is refused unless --replace."""
    spec = load_spec(spec_path)
    require_no_errors(spec)
    state, inventory = pipeline.up(spec, reporter_for(json_out, verbose), spec_path, replace=replace)
    render_up(spec, state, inventory, json_out)


def render_up(spec: ClusterSpec, state: ClusterState, inventory: Inventory, json_out: bool) -> None:
    if json_out:
        print_json(
            {
                "cluster": spec.name,
                "provider": spec.provider.kind,
                "inventory": str(state.inventory_file),
                "hosts": [h.model_dump(mode="json") for h in inventory.hosts],
                "applied": applied_changes(state),
            }
        )
        return
    console.print(hosts_table(f"cluster {spec.name} ({spec.provider.kind}) is up", inventory.hosts))
    for change in applied_changes(state):
        console.print(f"changed in place: {escape(change)}")
    console.print(f"inventory: {escape(str(state.inventory_file))}")


def hosts_table(title: str, hosts: Sequence[Host]) -> Table:
    """The hosts ``up`` made. An 80-column terminal shows every host name whole: cells fold, never cut
    ("demo-control…" before), and a host's roles go one per line."""
    table = Table(title=title, pad_edge=False)
    for column in ("host", "roles", "address", "type", "GPUs", "CPUs", "mem MB"):
        # An address reads whole on one line (at most 15 characters); the rest fold if they must.
        widest = max((len(h.address) for h in hosts), default=0) if column == "address" else None
        table.add_column(column, overflow="fold", min_width=widest)
    for host in hosts:
        table.add_row(
            host.name,
            "\n".join(r.value for r in host.roles),
            host.address,
            host.instance_type,
            str(host.gpus),
            str(host.cpus),
            str(host.memory_mb),
        )
    return table


def applied_changes(state: ClusterState) -> list[str]:
    """The spec's changes that the last ``up`` applied in place (its phase record)."""
    phase = state.load().get("phases", {}).get("up", {}) if state.exists() else {}
    return [str(change) for change in phase.get("applied", [])]


def configure(spec_path: SpecArg, json_out: JsonOpt = False, verbose: VerboseOpt = False) -> None:
    """Run playbooks/site.yml (every role the cluster's nodes need) on the cluster. Safe to re-run."""
    spec = load_spec(spec_path)
    render_configure(spec, pipeline.configure(spec, reporter_for(json_out, verbose)), json_out)


def render_configure(spec: ClusterSpec, result: PlayResult, json_out: bool) -> None:
    if json_out:
        print_json(
            {
                "cluster": spec.name,
                "ok": result.ok,
                "changed": result.changed,
                "changed_tasks": result.changed_tasks,
                "install_phase": result.install_phase,
                "artifacts": str(result.artifacts) if result.artifacts else None,
            }
        )
        return
    console.print(f"configured {spec.name}: {result.changed} task(s) changed")


def status(spec_path: SpecArg, json_out: JsonOpt = False) -> None:
    """Show the cluster's nodes, phases and expiry."""
    spec = load_spec(spec_path)
    state = ClusterState.for_name(spec.name)
    result = pipeline.status(spec)
    if json_out:
        print_json(result)
        return
    record = result.get("state")
    # An adopted cluster's Pulumi stack is named by its project, not after the cluster: show both.
    named = f"cluster {spec.name}" + (f", stack {result['stack']}" if result.get("stack") else "")
    if record is None:
        console.print(f"{escape(named)}: not up (no state at {escape(str(state.root))})")
    else:
        phases = ", ".join(f"{k}: {v['status']}" for k, v in record.get("phases", {}).items()) or "none"
        console.print(
            f"{escape(named)} ({spec.provider.kind}); created {record['created_at']}; "
            f"expires {record['expires_at']}; phases: {phases}"
        )
    nodes = result.get("nodes") or []
    if nodes:
        table = Table()
        for column in ("node", "roles", "ip", "status"):
            table.add_column(column)
        for node in nodes:
            table.add_row(node["name"], node.get("roles", ""), str(node.get("ip")), node.get("status", ""))
        console.print(table)


DiscardOpt = Annotated[
    bool,
    typer.Option(
        "--discard-checkpoints",
        help="do not export the filesystem to its durable copy (FSx data repository, Managed Lustre "
        "data_repository) first: destroy it, and every checkpoint on it not yet copied, anyway",
    ),
]
ExportTimeoutOpt = Annotated[
    int,
    typer.Option(
        "--export-timeout",
        min=0,
        metavar="SECONDS",
        help="how long to wait for that export; when it fails or takes longer, down destroys nothing",
    ),
]


def down(
    spec_path: SpecArg,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
    discard_checkpoints: DiscardOpt = False,
    export_timeout: ExportTimeoutOpt = DEFAULT_TIMEOUT_S,
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack",
            help="the cluster is this Pulumi stack of --project-dir (CI's pulumi up): destroy through it, "
            "adopted here or not",
            show_default=False,
        ),
    ] = None,
    project_dir: Annotated[
        Path, typer.Option("--project-dir", help="with --stack: the Pulumi project folder (its Pulumi.yaml)")
    ] = Path("stacks"),
) -> None:
    """Destroy everything the cluster made, then check that nothing is left.

    A filesystem with a durable copy (FSx linked to S3, Managed Lustre with a
    data_repository) is exported to it first; when the export fails or times
    out, down destroys nothing (exit 4), unless --discard-checkpoints."""
    spec = load_spec(spec_path)
    durable = DurableCopyOptions(discard=discard_checkpoints, timeout_s=export_timeout)
    project = AdoptedStack(stack=stack, project_dir=project_dir.resolve()) if stack is not None else None
    render_down(spec, pipeline.down(spec, reporter_for(json_out, verbose), durable, project), json_out)


def render_down(spec: ClusterSpec, teardown: Teardown, json_out: bool) -> None:
    """Print what teardown removed; exit 9 when something is still there."""
    if json_out:
        print_json({"cluster": spec.name, **teardown.to_json()})
    else:
        _print_teardown(teardown)
    if teardown.leftovers:
        raise typer.Exit(ExitCode.LEFTOVERS)


def _print_teardown(teardown: Teardown) -> None:
    console.print(f"removed {len(teardown.removed)} item(s) of {escape(teardown.named())}:")
    for item in teardown.removed:
        console.print(f"  - {escape(item)}")
    if teardown.logs:
        console.print(f"the logs of the failed phase(s) are kept in {escape(teardown.logs)}")
    console.print("nothing left" if not teardown.leftovers else f"[red]left: {teardown.leftovers}[/]")
