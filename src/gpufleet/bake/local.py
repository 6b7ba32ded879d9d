"""The local backend's baker: podman images in this machine's store, recorded in their own labels
(``gpufleet.infra.local.bake``), committed from a one-node builder.

The builder is a one-node local cluster (``bake-<hash>``) whose node is in every inventory group, so every
role's install phase runs on it: Slurm's controller and compute packages, munge, Open MPI and PMIx, the
benchmark build, and whatever later roles tag ``install``. ``playbooks/bake.yml`` then seals it (daemons
disabled, SSH host keys and the package's munge key removed), the node is stopped and committed, and the
builder is removed whatever happened. The Ansible log of the bake is kept under
``~/.cache/gpufleet/bake-logs/<hash>/``.
"""

from __future__ import annotations

import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.bake.result import BakeResult, choose_newest
from gpufleet.errors import LeftoversError, ProvisionError, SpecError
from gpufleet.infra.images import content_hash
from gpufleet.infra.local import bake
from gpufleet.infra.local.cluster import LocalCluster, NodePlan, cache_dir
from gpufleet.infra.local.image import build_lock, ensure_node_image
from gpufleet.infra.local.podman import Podman
from gpufleet.paths import project_root
from gpufleet.progress import Reporter
from gpufleet.spec.model import Access, ClusterSpec, NoFilesystem, Role
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.plan import Plan


def _podman() -> Podman:
    return Podman(cache_dir())


class LocalBaker:
    in_run = True  # minutes of this machine, and every later run of the same roles starts from it

    def digest(self, spec: ClusterSpec) -> str:
        return content_hash(project_root(), bake.bake_pins(spec))

    def newest(self, spec: ClusterSpec, reporter: Reporter) -> bake.BakedImage | None:
        """The podman image baked from the roles and pins now, if this machine has one, said either way."""
        podman = _podman()
        return choose_newest(
            self.digest(spec),
            lambda digest: bake.find_image(podman, digest),
            reporter.info,
            unbaked="configure installs the software on every node",
            baked="configure does only the per-cluster work",
        )

    def build(self, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> BakeResult:
        """The baked image for ``spec``'s roles and pins, built when podman has none (or ``rebuild``)."""
        provider = bake.provider_of(spec)
        podman = _podman()
        pins = bake.bake_pins(spec)
        digest = self.digest(spec)
        with build_lock(cache_dir(), f"bake-{digest[:12]}"):
            existing = bake.find_image(podman, digest)
            if existing is not None and not rebuild:
                return BakeResult(existing, built=False)
            base, _ = ensure_node_image(
                podman,
                cache_dir(),
                release=provider.debian_release,
                mirror=provider.mirror,
                reporter=reporter,
            )
            ref = bake.image_ref(provider.debian_release, digest)
            _bake(spec, podman, reporter, base=base, ref=ref, digest=digest, pins=pins)
        image = bake.find_image(podman, digest)
        if image is None:
            raise ProvisionError(f"podman commit reported success but {ref} is not in podman's store")
        return BakeResult(image, built=True)

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


def _bake(
    spec: ClusterSpec,
    podman: Podman,
    reporter: Reporter,
    *,
    base: str,
    ref: str,
    digest: str,
    pins: dict[str, object],
) -> None:
    from gpufleet.configure.node_site import bake_vars
    from gpufleet.configure.runner import run_playbook
    from gpufleet.infra.software import with_software

    name = f"bake-{digest[:8]}"
    # The user's spec with a one-node layout: no shared volume, no user key (nobody logs in).
    builder_spec = spec.model_copy(update={"name": name, "filesystem": NoFilesystem(), "access": Access()})
    node = NodePlan(f"{name}-builder", (Role.CONTROLLER, Role.LOGIN, Role.COMPUTE))
    logs = cache_dir() / "bake-logs" / digest[:12]
    with tempfile.TemporaryDirectory(prefix="bake-", dir=cache_dir()) as tmp:
        state = ClusterState(name=name, root=Path(tmp) / name)
        builder = LocalCluster(builder_spec, state, reporter, nodes=[node])
        try:
            inventory = with_software(builder.up(image=base), spec)
            inventory.write(state.inventory_file)
            with reporter.step(f"bake: install phase of every role on {node.name}"):
                # The site the nodes configure themselves from at boot (roles/boot_configure).
                extravars = bake_vars(inventory, digest, reporter)
                run_playbook(
                    "bake.yml", state.inventory_file, logs, reporter, tags="install", extravars=extravars
                )
            with reporter.step(f"commit {node.name} as {ref}"):
                podman.run("stop", "-t", "10", node.name, what=f"stopping {node.name}")
                changes = []
                for key, value in bake.bake_labels(digest, base, pins).items():
                    changes += ["--change", f"LABEL {key}={_label_value(value)}"]
                podman.run("commit", "--quiet", *changes, node.name, ref, timeout=1800, what="podman commit")
        finally:
            builder.destroy()
            state.remove()
            left = builder.leftovers()
            if left:
                raise LeftoversError(
                    "the image builder's " + ", ".join(left) + " could not be removed",
                    hint="remove them with podman rm / network rm",
                )


def _label_value(value: str) -> str:
    """A value for ``podman commit --change 'LABEL k=v'``, which keeps quotes and backslashes literally
    and ends the value at whitespace: the values gpufleet writes (hashes, image names, compact JSON of
    version pins) have none, and one that had would be cut short, so it is refused."""
    if any(character.isspace() for character in value):
        raise ProvisionError(f"an image label value may not contain whitespace: {value!r}")
    return value
