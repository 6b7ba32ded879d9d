"""The local backend's baker: podman images committed from a one-node builder
(``gpufleet.infra.local.builder``), recorded in their own labels (``gpufleet.infra.local.bake``), in this
machine's podman store."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from gpufleet.errors import SpecError
from gpufleet.infra.local import bake
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.infra.local.builder import BakeResult
    from gpufleet.infra.local.podman import Podman
    from gpufleet.infra.plan import Plan


def _podman() -> Podman:
    from gpufleet.infra.local.cluster import cache_dir
    from gpufleet.infra.local.podman import Podman

    return Podman(cache_dir())


class LocalBaker:
    in_run = True  # minutes of this machine, and every later run of the same roles starts from it

    def digest(self, spec: ClusterSpec) -> str:
        return bake.spec_hash(spec)

    def newest(self, spec: ClusterSpec, reporter: Reporter) -> bake.BakedImage | None:
        """The podman image baked from the roles and pins now, if this machine has one, said either way."""
        digest = bake.spec_hash(spec)
        found = bake.find_image(_podman(), digest)
        if found is None:
            reporter.info(
                f"no baked image for the current roles and pins (hash {digest[:12]}): configure installs "
                "the software on every node ('gpufleet image build SPEC' bakes one)"
            )
        else:
            reporter.info(
                f"node image {found.ref}: baked {found.created} from the current roles and pins "
                f"(hash {digest[:12]}); configure does only the per-cluster work"
            )
        return found

    def build(self, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> BakeResult:
        from gpufleet.infra.local.builder import ensure_baked_image

        return ensure_baked_image(spec, reporter, rebuild=rebuild)

    def preview(self, spec: ClusterSpec, created_at: datetime) -> Plan:
        raise SpecError(
            "--plan shows the builder stack of a cloud spec; a local spec bakes on a podman node",
            hint="run 'gpufleet image build SPEC' without --plan",
        )

    def images(self, spec: ClusterSpec | None) -> list[bake.BakedImage]:
        return bake.list_images(_podman())

    def delete(self, spec: ClusterSpec | None, name: str) -> tuple[bake.BakedImage, list[str]]:
        image = bake.delete_image(_podman(), name)
        return image, [image.ref]


baker = LocalBaker()
