"""``gpufleet reap``: tear down the clusters whose lifetime has passed (run it from cron or CI)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.common import JsonOpt, console, err_console, print_json
from gpufleet.cli.progress import RichReporter
from gpufleet.errors import ExitCode
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.stack_configs import project_stacks
from gpufleet.lifecycle import teardown
from gpufleet.lifecycle.lock import hold_cluster_lock
from gpufleet.lifecycle.reap import CloudExpired, ReapItem, project_stack_destroy, reap_stacks
from gpufleet.lifecycle.reap import reap as reap_expired
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.lifecycle.images import PrunedImage


def reap(
    json_out: JsonOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list what would be destroyed, destroy nothing")
    ] = False,
    aws_region: Annotated[
        list[str] | None,
        typer.Option("--aws-region", help="also list expired clusters by their AWS tags in this region"),
    ] = None,
    gcp_project: Annotated[
        list[str] | None,
        typer.Option("--gcp-project", help="also list expired clusters by their GCP labels in this project"),
    ] = None,
    azure_subscription: Annotated[
        list[str] | None,
        typer.Option(
            "--azure-subscription", help="also list expired clusters by their Azure tags in this subscription"
        ),
    ] = None,
    destroy_stacks: Annotated[
        Path | None,
        typer.Option(
            "--destroy-stacks",
            help="destroy the expired clusters found by --aws-region/--gcp-project/--azure-subscription "
            "through the stack of this "
            "Pulumi project folder whose spec names them (e.g. stacks); --dry-run only lists them",
            show_default=False,
        ),
    ] = None,
    prune_images: Annotated[
        bool,
        typer.Option(
            "--prune-images",
            help="also apply the baked images' retention rule in those regions and projects (docs/aws.md)",
        ),
    ] = False,
) -> None:
    """Destroy every cluster made on this machine whose lifetime (spec lifetime.ttl) has passed.

    Exits 1 when a teardown failed. With --aws-region (--gcp-project, --azure-subscription), clusters tagged
    gpufleet:expires-at (labelled gpufleet-expires-at) in the past are listed too (those made from CI have
    no state here); with --destroy-stacks DIR each is destroyed through the one stack of that Pulumi
    project folder whose spec names it (pulumi destroy, then the leftover check). With --prune-images,
    baked images there that the retention rule lets go are deleted (listed with --dry-run): never one a
    node runs from or a cluster state on this machine records.
    """
    if destroy_stacks is not None and not (destroy_stacks / "Pulumi.yaml").is_file():
        raise typer.BadParameter(
            f"{destroy_stacks} holds no Pulumi project (no Pulumi.yaml): pass the folder that holds "
            "Pulumi.yaml and the Pulumi.<stack>.yaml files, e.g. stacks",
            param_hint="--destroy-stacks",
        )
    reporter = RichReporter(err_console if json_out else console)  # stdout holds only the JSON

    def tear_down(spec: ClusterSpec, state: ClusterState) -> list[str]:
        hold_cluster_lock(spec.name, "reap")  # a cluster another command is working on is left alone
        report = teardown.down(spec, state, reporter)
        report.raise_for_leftovers()
        return report.removed

    items = reap_expired(tear_down, dry_run=dry_run)
    cloud = {
        "aws": _cloud_expired("aws", aws_region or []),
        "gcp": _cloud_expired("gcp", gcp_project or []),
        "azure": _cloud_expired("azure", azure_subscription or []),
    }
    stacks = _stacks(destroy_stacks, cloud, reporter, dry_run) if destroy_stacks is not None else []
    pruned = _pruned(aws_region or [], gcp_project or [], dry_run) if prune_images else []
    acted: list[ReapItem | PrunedImage] = [*items, *stacks, *pruned]
    failed = [item for item in acted if item.action.startswith("failed")]
    if json_out:
        images = {"images": [item.to_json() for item in pruned]} if prune_images else {}
        made = {"stacks": [item.to_json() for item in stacks]} if destroy_stacks is not None else {}
        print_json({"local": [item.to_json() for item in items], **cloud, **made, **images})
    else:
        table = Table(title="expired clusters")
        for column in ("cluster", "provider", "expired at", "action"):
            table.add_column(column, overflow="fold")
        for item in items:
            table.add_row(item.cluster, item.provider, item.expires_at, escape(item.action))
        for item in stacks:
            table.add_row(item.cluster, item.provider, item.expires_at, escape(item.action))
        listed = [(kind, entry) for kind, entries in cloud.items() for entry in entries]
        for kind, entry in listed if destroy_stacks is None else []:
            table.add_row(
                entry["cluster"],
                f"{kind} {entry[pulumi_backend_of(kind).expiry_scope]}",
                entry["expires_at"],
                f"{entry['resources']} tagged resource(s) left: destroy its stack",
            )
        console.print(table if items or listed or stacks else "no expired cluster")
        if prune_images:
            _print_pruned(pruned)
    if failed:
        raise typer.Exit(ExitCode.FAILED)


def _cloud_expired(kind: str, scopes: list[str]) -> list[dict[str, Any]]:
    """Expired clusters found by a cloud's tags or labels, in each region (AWS), project (GCP) or
    subscription (Azure)."""
    if not scopes:
        return []
    cloud = pulumi_backend_of(kind)
    return [
        {
            cloud.expiry_scope: scope,
            "cluster": e.cluster,
            "expires_at": e.expires_at.isoformat(),
            "resources": e.resources,
        }
        for scope in scopes
        for e in cloud.find_expired(scope)
    ]


def _stacks(
    project: Path, cloud: dict[str, list[dict[str, Any]]], reporter: RichReporter, dry_run: bool
) -> list[ReapItem]:
    """The clouds' expired clusters, destroyed (or, on a dry run, listed) through the project's stacks."""
    problems: list[str] = []
    by_cluster = project_stacks(project, problems)
    broken = [ReapItem("?", "?", "?", f"skipped: {problem}") for problem in problems]
    expired = [
        CloudExpired(entry["cluster"], kind, entry[pulumi_backend_of(kind).expiry_scope], entry["expires_at"])
        for kind, entries in cloud.items()
        for entry in entries
    ]
    destroy = project_stack_destroy(project.resolve(), reporter)
    return broken + reap_stacks(expired, by_cluster, destroy, dry_run=dry_run)


def _pruned(regions: list[str], projects: list[str], dry_run: bool) -> list[PrunedImage]:
    from gpufleet.lifecycle.images import prune

    return [
        item
        for kind, scopes in (("aws", regions), ("gcp", projects))
        for scope in scopes
        for item in prune(pulumi_backend_of(kind).images, scope, dry_run=dry_run)
    ]


def _print_pruned(pruned: list[PrunedImage]) -> None:
    if not pruned:
        console.print("no baked image to let go (the retention rule keeps every one)")
        return
    table = Table(title="baked images past the retention rule")
    for column in ("where", "image", "hash", "created", "action"):
        table.add_column(column, overflow="fold")
    for item in pruned:
        image = item.image
        table.add_row(item.scope, image.id, image.digest[:12], image.created, escape(item.action))
    console.print(table)
