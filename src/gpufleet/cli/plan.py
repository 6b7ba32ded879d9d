"""``gpufleet plan SPEC``: what ``pulumi up`` would create for a cloud spec, offline, and its hourly cost.

Runs ``gpufleet.infra.program.plan_spec`` (the cluster's own Pulumi program under Pulumi's unit-test
mocks: no credentials, no Pulumi CLI) and prints every resource with its key properties, the counts
per type and the on-demand cost per hour from the catalog; with a ``checkpoint`` block, the checkpoint's
size and write time at the filesystem's throughput (``gpufleet.preflight.checkpoint``). Cloud-blind: it
reads the recorded resources' type tokens and inputs and nothing else. ``--json`` prints
``{"resources": [{"type", "name", "inputs"}, ...], "cost_per_hour_usd": ..., ...}``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.table import Table

from gpufleet.catalog import load_catalog
from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json
from gpufleet.preflight.checkpoint import checkpoint_json, checkpoint_plan
from gpufleet.spec import load_spec


def _replacing_fields(kind: str) -> tuple[str, ...]:
    """The spec fields whose later change replaces a group's nodes (a Pulumi cloud's own list)."""
    from gpufleet.infra.backend import pulumi_backend_of
    from gpufleet.providers import PULUMI_KINDS

    return pulumi_backend_of(kind).replacing_fields if kind in PULUMI_KINDS else ()


def plan(spec_path: SpecArg, json_out: JsonOpt = False) -> None:
    """Show what 'pulumi up' would create for SPEC, offline (no credentials, no Pulumi CLI), and its cost."""
    from gpufleet.infra import program
    from gpufleet.infra.plan import collapse, summarize

    spec = load_spec(spec_path)
    result = program.plan_spec(spec, datetime.now(UTC))
    total, lines = program.hourly_cost(spec)
    counts = result.counts()
    replacing = _replacing_fields(spec.provider.kind)
    # Registration order depends on when each resource's inputs resolve; type and name order does not.
    resources = sorted(result.resources, key=lambda r: (r.type, r.name))
    if json_out:
        print_json(
            {
                "spec": str(spec_path),
                "resources": [resource.to_json() for resource in resources],
                "counts": dict(sorted(counts.items())),
                "cost_per_hour_usd": total,
                "cost_breakdown": lines,
                "replaces_nodes": list(replacing),
                "checkpoint": checkpoint_json(spec),
            }
        )
        return

    table = Table(title=f"plan: {spec.name} ({spec.provider.kind}), offline", show_lines=False)
    table.add_column("type", overflow="fold")
    table.add_column("name", overflow="fold")
    table.add_column("key properties", overflow="fold")
    rows = ((r.type, r.name, summarize(r.inputs)) for r in resources)
    for type_, name, summary, count in collapse(rows):
        table.add_row(type_, name if count == 1 else f"{name} ({count})", summary)
    console.print(table)

    totals = Table(title="resources per type")
    totals.add_column("type")
    totals.add_column("count", justify="right")
    for type_, count in sorted(counts.items()):
        totals.add_row(type_, str(count))
    totals.add_row("[bold]total[/]", f"[bold]{sum(counts.values())}[/]")
    console.print(totals)
    if replacing:
        console.print(
            "[bold]replaces nodes:[/] a later change of a group's "
            + ", ".join(replacing)
            + " makes new nodes for the group (its old ones are deleted first), not an update in place"
        )

    cost = Table(title="on-demand cost per hour (catalog prices)")
    for column in ("group", "instance type", "count", "USD/h each", "USD/h"):
        cost.add_column(column, justify="right" if column.startswith(("count", "USD")) else "left")
    for line in lines:
        each = line["price_per_hour_usd"]
        cost.add_row(
            line["group"],
            line["instance_type"],
            str(line["count"]),
            f"{each:,.4f}" if each is not None else "unknown",
            f"{line['cost_per_hour_usd']:,.2f}" if line["cost_per_hour_usd"] is not None else "unknown",
        )
    console.print(cost)
    if total is not None:
        console.print(
            f"[bold]cost: ${total:,.2f} per hour[/] on demand (spot, reservations and Capacity "
            "Blocks are priced differently; storage and data transfer not included)"
        )
    else:
        known = sum(line["cost_per_hour_usd"] or 0 for line in lines)
        unknown = ", ".join(line["instance_type"] for line in lines if line["price_per_hour_usd"] is None)
        console.print(
            f"[bold]cost: unknown[/]: the catalog has no price for {unknown}; the priced groups come to "
            f"${known:,.2f} per hour"
        )
    for finding in checkpoint_plan(spec, load_catalog()):
        level = "" if finding.level.value == "info" else f" {finding.level.value}"
        console.print(f"[bold]checkpoint{level}:[/] {finding.message}")
