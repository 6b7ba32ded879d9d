"""``gpufleet image build / list / delete``: node images with the roles' install phase baked in.

Local specs bake a podman image (docs/local.md); AWS and GCP specs an AMI or a GCP image from a builder
instance (``gpufleet.infra.cloudbake``; docs/aws.md, docs/gcp.md). ``list`` and ``delete`` look at podman
without ``--spec``, and at the spec's region (AWS) or project (GCP) with a cloud spec.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.cluster import VerboseOpt, reporter_for
from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json, read_spec
from gpufleet.errors import SpecError
from gpufleet.infra.images import CloudImage, the_one
from gpufleet.spec.model import ClusterSpec, LocalProvider

if TYPE_CHECKING:
    from gpufleet.infra.automation import PulumiBackend
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


def _is_local(spec: ClusterSpec | None) -> bool:
    return spec is None or isinstance(spec.provider, LocalProvider)


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:.0f} MB"


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
    spec = read_spec(spec_path)
    if _is_local(spec):
        if plan:
            raise SpecError(
                "--plan shows the builder stack of a cloud spec; a local spec bakes on a podman node",
                hint="run 'gpufleet image build SPEC' without --plan",
            )
        _build_local(spec, rebuild, json_out, verbose)
        return
    from gpufleet.infra import cloudbake

    if plan:
        _show_plan(spec, cloudbake.preview(spec, created_at=datetime.now(UTC)), json_out)
        return
    result = cloudbake.bake(spec, reporter_for(json_out, verbose), rebuild=rebuild)
    if json_out:
        print_json({"built": result.built, **result.image.as_json()})
        return
    verb = "baked" if result.built else "already baked (same roles and pins)"
    console.print(
        f"{escape(result.image.id)} ({escape(result.image.name)}): {verb}; hash {result.image.digest[:12]}"
    )


def _build_local(spec: ClusterSpec, rebuild: bool, json_out: bool, verbose: bool) -> None:
    from gpufleet.infra.local.builder import ensure_baked_image

    result = ensure_baked_image(spec, reporter_for(json_out, verbose), rebuild=rebuild)
    if json_out:
        print_json({"built": result.built, **result.image.as_json()})
        return
    image = result.image
    verb = "baked" if result.built else "already baked (same roles and pins)"
    console.print(f"{escape(image.ref)}: {verb}; hash {image.digest[:12]}, {_size(image.size_bytes)}")


def _show_plan(spec: ClusterSpec, result: Plan, json_out: bool) -> None:
    from gpufleet.cli.plan import collapse, summarize

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
    spec = read_spec(spec_path) if spec_path is not None else None
    if not _is_local(spec):
        assert spec is not None
        _list_cloud(spec, json_out)
        return
    from gpufleet.infra.local import bake
    from gpufleet.infra.local.cluster import cache_dir
    from gpufleet.infra.local.podman import Podman

    images = bake.list_images(Podman(cache_dir()))
    if json_out:
        print_json([image.as_json() for image in images])
        return
    if not images:
        console.print("no baked images (gpufleet image build SPEC makes one; gpufleet run makes one too)")
        return
    table = Table(title="baked node images")
    for column in ("name", "hash", "base", "created", "size", "used by"):
        table.add_column(column, overflow="fold")
    for image in images:
        table.add_row(
            image.ref,
            image.digest[:12],
            image.base,
            image.created,
            _size(image.size_bytes),
            ", ".join(image.used_by) or "-",
        )
    console.print(table)


def _cloud(spec: ClusterSpec) -> PulumiBackend:
    """The spec's cloud backend, once its credentials are there (``EnvironmentProblem`` otherwise)."""
    from gpufleet.infra.program import pulumi_backend

    cloud = pulumi_backend(spec)
    cloud.check_credentials(spec)
    return cloud


def _list_cloud(spec: ClusterSpec, json_out: bool) -> None:
    cloud = _cloud(spec)
    images = cloud.list_images(cloud.image_scope(spec))
    if json_out:
        print_json([image.as_json() for image in images])
        return
    if not images:
        console.print(f"no baked images for {spec.provider.kind} here (gpufleet image build SPEC makes one)")
        return
    table = Table(title=f"baked node images ({spec.provider.kind})")
    for column in ("id", "hash", "base", "created", "used by"):
        table.add_column(column, overflow="fold")
    for image in images:
        table.add_row(image.id, image.digest[:12], image.base, image.created, ", ".join(image.used_by) or "-")
    console.print(table)


def resolve_cloud(images: list[CloudImage], name: str) -> CloudImage:
    """The one image ``name`` means: its id, its name, or a prefix (6+ characters) of its hash."""
    wanted = name.strip()
    found = [
        image
        for image in images
        if wanted in (image.id, image.name) or (len(wanted) >= 6 and image.digest.startswith(wanted))
    ]
    return the_one(
        found,
        images,
        name,
        lambda image: image.id,
        where="there",
        hint="give the image's id (gpufleet image list --spec SPEC)",
    )


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="the image's name, tag or id, or a prefix of its hash")],
    spec_path: SpecOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove a baked image (on AWS with its snapshots). Refused while any cluster's node runs from it."""
    spec = read_spec(spec_path) if spec_path is not None else None
    if not _is_local(spec):
        assert spec is not None
        cloud = _cloud(spec)
        scope = cloud.image_scope(spec)
        image = resolve_cloud(cloud.list_images(scope), name)
        removed = cloud.delete_image(scope, image)
        if json_out:
            print_json({"deleted": image.id, "hash": image.digest, "removed": removed})
            return
        console.print(f"deleted {escape(', '.join(removed))} (hash {image.digest[:12]})")
        return
    from gpufleet.infra.local import bake
    from gpufleet.infra.local.cluster import cache_dir
    from gpufleet.infra.local.podman import Podman

    local = bake.delete_image(Podman(cache_dir()), name)
    if json_out:
        print_json({"deleted": local.ref, "hash": local.digest})
        return
    console.print(f"deleted {escape(local.ref)} (hash {local.digest[:12]})")
