"""The ``Baker`` each backend has, built here from the backend table (``gpufleet.infra.backend``): a
``CloudBaker`` for a backend that bakes in its cloud (AWS, GCP: AMIs and GCP images,
``gpufleet.bake.cloud``), a ``LocalBaker`` for one that bakes on this machine (podman images,
``gpufleet.bake.local``), None where nothing is baked (bare metal, and Azure until it has a builder); and
the hash of a spec's roles and pins now, asked of its baker.

``gpufleet image``, ``pipeline.up`` and ``configure`` talk to a baker and never branch on the provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from gpufleet.bake.result import BakeResult
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.images import BakedRecord
from gpufleet.progress import Reporter
from gpufleet.providers import BACKENDS
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    from gpufleet.infra.plan import Plan


class Baker(Protocol):
    """Builds, lists and deletes one backend's baked images."""

    @property
    def in_run(self) -> bool:
        """Whether ``gpufleet run`` bakes first (a bake that costs nothing but time on this machine)."""
        ...

    def digest(self, spec: ClusterSpec) -> str:
        """The content hash of the roles and the spec's pins now (``gpufleet.infra.images``)."""
        ...

    def newest(self, spec: ClusterSpec, reporter: Reporter) -> BakedRecord | None:
        """The image a cluster of ``spec`` boots: the newest baked from the roles and pins now, or None
        (nodes boot the base image and configure installs); the choice is said either way
        (``gpufleet.bake.result.choose_newest``). ``pipeline.up`` asks it and hands the answer to
        ``Backend.up`` as data."""
        ...

    def build(self, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> BakeResult:
        """The baked image of the spec's roles and pins, built when there is none (or ``rebuild``)."""
        ...

    def preview(self, spec: ClusterSpec, created_at: datetime) -> Plan:
        """What a build would register, offline (``SpecError`` where a build registers nothing)."""
        ...

    def images(self, spec: ClusterSpec | None) -> Sequence[BakedRecord]:
        """Its baked images, newest first, with the clusters that use each."""
        ...

    def delete(self, spec: ClusterSpec | None, name: str) -> tuple[BakedRecord, list[str]]:
        """Delete the one image ``name`` means, refused while a node runs from it; the image and what went."""
        ...


# The backend whose images live on this machine: ``gpufleet image list`` and ``delete`` without a spec.
HOST_BACKEND = next(kind for kind, entry in BACKENDS.items() if entry.bakes_here)


def baker_of(kind: str) -> Baker | None:
    """The baker of a provider kind, from its row of the backend table."""
    entry = BACKENDS[kind]
    if entry.bakes_in_cloud:
        from gpufleet.bake.cloud import CloudBaker

        return CloudBaker(pulumi_backend_of(kind))
    if entry.bakes_here:
        from gpufleet.bake.local import LocalBaker

        return LocalBaker()
    return None


def baker_for(spec: ClusterSpec | None) -> Baker | None:
    """The baker of the spec's backend (of this machine's without a spec), or None where none bakes."""
    return baker_of(spec.provider.kind if spec is not None else HOST_BACKEND)


def spec_hash(spec: ClusterSpec) -> str | None:
    """The hash of the spec's roles and pins now, or None for a backend that does not bake (bare metal)."""
    baker = baker_for(spec)
    return None if baker is None else baker.digest(spec)


def baked_and_current(spec: ClusterSpec, recorded: str | None) -> str | None:
    """``recorded``, the hash the inventory says every node is baked from (``Inventory.baked_image_hash``),
    if it is still the current one, else None.

    When it is, the nodes already hold what the install phase would install, so ``configure`` runs with
    ``--skip-tags install``; when the roles or pins changed since, it runs in full (docs/local.md).
    """
    if not recorded:
        return None
    return recorded if recorded == spec_hash(spec) else None
