"""``gpufleet baseline``: the ledger of this site's validation runs and the site baselines derived from it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import JsonOpt, console, print_json
from gpufleet.spec.units import format_bytes
from gpufleet.validate import ledger as site_ledger


def baseline(
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", help="the ledger file (default: $GPUFLEET_LEDGER, else the state folder's)"),
    ] = None,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="only runs of this catalog instance type")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the ledger of this site's validation runs and the site baseline each (type, nodes, collective,
    versions) gets: the median busbw of its passing runs. 'validation.baseline: ledger' gates on it."""
    path = site_ledger.ledger_path(ledger)
    entries = [e for e in site_ledger.read(path) if instance_type is None or e.instance_type == instance_type]
    derived = site_ledger.site_baselines(entries)
    if json_out:
        print_json(
            {
                "ledger": str(path),
                "runs": [entry.to_json() for entry in entries],
                "site_baselines": [
                    {
                        "instance_type": d.key[0],
                        "nodes": d.key[1],
                        "collective": d.key[2],
                        "nccl": d.key[3],
                        "plugin": d.key[4],
                        "busbw": d.busbw,
                        "message_bytes": d.message_bytes,
                        "runs": d.runs,
                    }
                    for d in derived
                ],
            }
        )
        return
    console.print(f"ledger: {escape(str(path))} ({len(entries)} run(s))", soft_wrap=True)
    if not entries:
        console.print("no run yet: every 'gpufleet validate' appends its figures here")
        return
    runs = Table(title="runs", width=min(80, console.width))
    for column in ("time", "cluster", "type x nodes", "collective", "busbw", "verdict"):
        runs.add_column(column, overflow="fold")
    for entry in entries:
        busbw = "-" if entry.busbw is None else f"{entry.busbw:.4g} GB/s"
        runs.add_row(
            entry.time,
            entry.cluster,
            f"{entry.nodes} x {entry.instance_type}",
            entry.collective or "?",
            busbw,
            entry.tier.upper(),
        )
    console.print(runs)
    table = Table(title="site baselines (median of passing runs)", width=min(80, console.width))
    for column in ("type x nodes", "collective", "NCCL / plugin", "busbw", "runs"):
        table.add_column(column, overflow="fold")
    for d in derived:
        versions = " / ".join(v for v in (d.key[3], d.key[4]) if v) or "unknown"
        table.add_row(
            f"{d.key[1]} x {d.key[0]}",
            d.key[2] or "?",
            versions,
            f"{d.busbw:.4g} GB/s at {format_bytes(d.message_bytes)}",
            str(d.runs),
        )
    console.print(table)
