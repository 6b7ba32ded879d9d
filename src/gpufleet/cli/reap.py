"""``gpufleet reap``: tear down the clusters whose lifetime has passed (run it from cron or CI)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import JsonOpt, console, err_console, print_json
from gpufleet.cli.progress import RichReporter
from gpufleet.errors import ExitCode
from gpufleet.infra import backend
from gpufleet.lifecycle.reap import reap as reap_expired
from gpufleet.lifecycle.state import ClusterState
from gpufleet.spec.model import ClusterSpec


def reap(
    json_out: JsonOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list what would be destroyed, destroy nothing")
    ] = False,
    aws_region: Annotated[
        list[str] | None,
        typer.Option("--aws-region", help="also list expired clusters by their AWS tags in this region"),
    ] = None,
) -> None:
    """Destroy every cluster made on this machine whose lifetime (spec lifetime.ttl) has passed.

    Exits 1 when a teardown failed. With --aws-region, clusters tagged gpufleet:expires-at in the past
    are listed too (those made from CI have no state here: destroy them from the stack that made them).
    """
    # With --json, progress goes to stderr so that stdout holds only the JSON document.
    reporter = RichReporter(err_console if json_out else console)

    def teardown(spec: ClusterSpec, state: ClusterState) -> list[str]:
        return backend.down(spec, state, reporter).removed

    items = reap_expired(teardown, dry_run=dry_run)
    cloud = []
    for region in aws_region or []:
        from gpufleet.lifecycle.leftovers_aws import find_expired

        cloud.extend(
            {
                "region": region,
                "cluster": e.cluster,
                "expires_at": e.expires_at.isoformat(),
                "resources": e.resources,
            }
            for e in find_expired(region)
        )
    failed = [item for item in items if item.action.startswith("failed")]
    if json_out:
        print_json({"local": [item.as_json() for item in items], "aws": cloud})
    else:
        table = Table(title="expired clusters")
        for column in ("cluster", "provider", "expired at", "action"):
            table.add_column(column, overflow="fold")
        for item in items:
            table.add_row(item.cluster, item.provider, item.expires_at, escape(item.action))
        for entry in cloud:
            table.add_row(
                entry["cluster"],
                f"aws {entry['region']}",
                entry["expires_at"],
                f"{entry['resources']} tagged resource(s) left: destroy its stack",
            )
        console.print(table if items or cloud else "no expired cluster")
    if failed:
        raise typer.Exit(ExitCode.FAILED)
