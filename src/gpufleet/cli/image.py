"""``gpufleet image build / list / delete``: node images with the roles' install phase baked in.

Local images only: an AWS AMI or a GCP image is not built by gpufleet yet (docs/local.md says how the
local one is made and kept).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.cluster import VerboseOpt, reporter_for
from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json, read_spec
from gpufleet.errors import SpecError
from gpufleet.spec.model import ClusterSpec, LocalProvider

app = typer.Typer(
    help="Node images with every role's install phase baked in (local backend): build, list, delete.",
    no_args_is_help=True,
)


def require_local(spec: ClusterSpec) -> None:
    if not isinstance(spec.provider, LocalProvider):
        raise SpecError(
            f"gpufleet image builds images for the local provider; {spec.name} uses {spec.provider.kind}",
            hint="AWS AMIs and GCP images are not built by gpufleet yet: their nodes install at configure",
        )


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:.0f} MB"


@app.command("build")
def build(
    spec_path: SpecArg,
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="build again even if an image with this hash exists")
    ] = False,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Bake the spec's roles and pins into a node image (kept and reused while they stay the same)."""
    from gpufleet.infra.local.builder import ensure_baked_image

    spec = read_spec(spec_path)
    require_local(spec)
    result = ensure_baked_image(spec, reporter_for(json_out, verbose), rebuild=rebuild)
    if json_out:
        print_json({"built": result.built, **result.image.as_json()})
        return
    image = result.image
    verb = "baked" if result.built else "already baked (same roles and pins)"
    console.print(f"{escape(image.ref)}: {verb}; hash {image.digest[:12]}, {_size(image.size_bytes)}")


@app.command("list")
def list_images(json_out: JsonOpt = False) -> None:
    """List the baked images, newest first, with the clusters whose nodes run from each."""
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


@app.command("delete")
def delete(
    name: Annotated[str, typer.Argument(help="the image's name, tag, or a prefix of its hash")],
    json_out: JsonOpt = False,
) -> None:
    """Remove a baked image. Refused while any cluster's node runs from it."""
    from gpufleet.infra.local import bake
    from gpufleet.infra.local.cluster import cache_dir
    from gpufleet.infra.local.podman import Podman

    image = bake.delete_image(Podman(cache_dir()), name)
    if json_out:
        print_json({"deleted": image.ref, "hash": image.digest})
        return
    console.print(f"deleted {escape(image.ref)} (hash {image.digest[:12]})")
