"""The ``Baker`` each backend offers (``Backend.baker``; None where nothing is baked: bare metal), and the
hash of a spec's roles and pins now, asked of its baker.

Local bakes podman images (``gpufleet.bake.local``); AWS and GCP bake AMIs and GCP images
(``gpufleet.bake.cloud``). ``gpufleet image`` and ``configure`` talk to a baker and never branch on the
provider.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.infra.backend import backend_for, backend_of
from gpufleet.infra.images import HASH_VAR
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.infra.plan import Plan


class BakedRecord(Protocol):
    """One baked image as a baker lists it (``CloudImage``, the local ``BakedImage``)."""

    digest: str
    used_by: tuple[str, ...]

    def as_json(self) -> dict[str, Any]: ...

    def said(self, verb: str) -> str:
        """One line for the user: the image, ``verb`` (baked, already baked, deleted) and its hash."""
        ...

    def row(self) -> dict[str, str]:
        """The image's columns in ``gpufleet image list``."""
        ...


class Baked(Protocol):
    image: Any  # a BakedRecord
    built: bool  # False: an image with this hash was already there


class Baker(Protocol):
    """Builds, lists and deletes one backend's baked images."""

    in_run: bool  # whether ``gpufleet run`` bakes first (a bake that costs nothing but time on this machine)

    def digest(self, spec: ClusterSpec) -> str:
        """The content hash of the roles and the spec's pins now (``gpufleet.infra.images``)."""
        ...

    def newest(self, spec: ClusterSpec, reporter: Reporter) -> Any | None:
        """The image a cluster of ``spec`` boots (a ``BakedRecord``): the newest baked from the roles and
        pins now, or None (nodes boot the base image and configure installs); the choice is said either
        way. ``pipeline.up`` asks it and hands the answer to ``Backend.up`` as data."""
        ...

    def build(self, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> Baked:
        """The baked image of the spec's roles and pins, built when there is none (or ``rebuild``)."""
        ...

    def preview(self, spec: ClusterSpec, created_at: datetime) -> Plan:
        """What a build would register, offline (``SpecError`` where a build registers nothing)."""
        ...

    def images(self, spec: ClusterSpec | None) -> list[Any]:
        """Its baked images (``BakedRecord``s), newest first, with the clusters that use each."""
        ...

    def delete(self, spec: ClusterSpec | None, name: str) -> tuple[Any, list[str]]:
        """Delete the one image ``name`` means, refused while a node runs from it; the image and what went."""
        ...


# The backend whose images live on this machine: ``gpufleet image list`` and ``delete`` without a spec.
HOST_BACKEND = "local"


def baker_for(spec: ClusterSpec | None) -> Baker | None:
    """The baker of the spec's backend (of this machine's without a spec), or None where none bakes."""
    backend = backend_for(spec) if spec is not None else backend_of(HOST_BACKEND)
    return backend.baker


def spec_hash(spec: ClusterSpec) -> str | None:
    """The hash of the spec's roles and pins now, or None for a backend that does not bake (bare metal)."""
    baker = baker_for(spec)
    return None if baker is None else baker.digest(spec)


def baked_and_current(spec: ClusterSpec, extra_vars: dict[str, Any]) -> str | None:
    """The hash the inventory says every node is baked from, if it is still the current one, else None.

    When it is, the nodes already hold what the install phase would install, so ``configure`` runs with
    ``--skip-tags install``; when the roles or pins changed since, it runs in full (docs/local.md).
    """
    recorded = extra_vars.get(HASH_VAR)
    if not recorded:
        return None
    return recorded if recorded == spec_hash(spec) else None
