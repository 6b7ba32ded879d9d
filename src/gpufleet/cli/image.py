"""``gpufleet image build / list / delete``: node images with the roles' install phase baked in.

Each backend's baker does the work (``gpufleet.bake``): local specs bake a podman image (docs/local.md);
AWS and GCP specs an AMI or a GCP image from a builder instance (docs/aws.md, docs/gcp.md). ``list`` and
``delete`` look at this machine's podman without ``--spec``, and at the spec's region (AWS) or project
(GCP) with a cloud spec. The commands render what the baker returns and never branch on the provider.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.cluster import VerboseOpt, reporter_for
from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json
from gpufleet.errors import SpecError
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.bake.baker import Baker
    from gpufleet.infra.plan import Plan

app = typer.Typer(
    help="Node images with every role's install phase baked in (local, AWS, GCP): build, list, delete.",
    no_args_is_help=True,
)

SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec", help="a cloud spec: its region (AWS) or project (GCP) holds the images; none: podman"
    ),
]


def _baker(spec: ClusterSpec | None) -> Baker:
    """The baker of the spec's backend (this machine's podman without a spec), or ``SpecError``."""
    from gpufleet.bake.baker import baker_for

    baker = baker_for(spec)
    if baker is None:
        assert spec is not None
        raise SpecError(
            f"provider '{spec.provider.kind}' bakes no node image: its machines are installed in place",
            hint="run 'gpufleet up SPEC' and 'gpufleet configure SPEC' (configure installs everything)",
        )
    return baker


@app.command("build")
def build(
    spec_path: SpecArg,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="build again even if an image with this hash exists")
    ] = False,
    plan: Annotated[
        bool,
        typer.Option("--plan", help="cloud specs: show the builder stack offline (mocks) and build nothing"),
    ] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Bake the spec's roles and pins into a node image (kept and reused while they stay the same)."""
    spec = load_spec(spec_path)
    baker = _baker(spec)
    if plan:
        _show_plan(spec, baker.preview(spec, datetime.now(UTC)), json_out)
        return
    result = baker.build(spec, reporter_for(json_out, verbose), rebuild=rebuild)
    if json_out:
        print_json({"built": result.built, **result.image.to_json()})
        return
    verb = "baked" if result.built else "already baked (same roles and pins)"
    console.print(escape(result.image.said(verb)))


def _show_plan(spec: ClusterSpec, result: Plan, json_out: bool) -> None:
    from gpufleet.infra.plan import collapse, summarize

    resources = sorted(result.resources, key=lambda r: (r.type, r.name))
    if json_out:
        print_json(
            {"resources": [r.to_json() for r in resources], "counts": dict(sorted(result.counts().items()))}
        )
        return
    table = Table(title=f"image builder for {spec.name} ({spec.provider.kind}), offline")
    for column in ("type", "name", "key properties"):
        table.add_column(column, overflow="fold")
    rows = ((r.type, r.name, summarize(r.inputs)) for r in resources)
    for type_, name, summary, count in collapse(rows):
        table.add_row(type_, name if count == 1 else f"{name} ({count})", summary)
    console.print(table)


@app.command("list")
def list_images(spec_path: SpecOpt = None, json_out: JsonOpt = False) -> None:
    """List the baked images, newest first, with the clusters whose nodes run from each."""
    spec = load_spec(spec_path) if spec_path is not None else None
    images = _baker(spec).images(spec)
    if json_out:
        print_json([image.to_json() for image in images])
        return
    kind = f" ({spec.provider.kind})" if spec is not None else ""
    if not images:
        console.print(f"no baked images{kind} here (gpufleet image build SPEC makes one; gpufleet run too)")
        return
    rows = [image.row() for image in images]
    table = Table(title=f"baked node images{kind}")
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(escape(value) for value in row.values()))
    console.print(table)


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="the image's name, tag or id, or a prefix of its hash")],
    spec_path: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove a baked image (on AWS with its snapshots). Refused while any cluster's node runs from it."""
    spec = load_spec(spec_path) if spec_path is not None else None
    image, removed = _baker(spec).delete(spec, name)
    if json_out:
        print_json({"deleted": image.ref, "hash": image.digest, "removed": removed})
        return
    console.print(f"deleted {escape(', '.join(removed))} (hash {image.digest[:12]})")
