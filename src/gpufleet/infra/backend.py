"""The one table from a spec's ``provider.kind`` to the backend that makes, shows and destroys its machines.

Every provider folder (``gpufleet.infra.local``, ``baremetal``, ``aws``, ``gcp``, ``azure``) exports
``backend``, an object with the methods of ``Backend``; every backend returns the same ``Inventory``. The
clouds' backends are ``PulumiBackend``s (``gpufleet.infra.automation``): the same cloud-blind Automation API
driver, with the cloud's own component, mocks, stack config, credentials check, SSH route, leftover finder
and baked images. This is the only place that names the providers; nothing else branches on
``provider.kind``: what differs between them is a column here (a Pulumi program, images baked in the cloud
or on this machine, configure from the head). The bakers stand above this table (``gpufleet.bake.baker``
builds one per backend from it).

Provider folders are imported on first use, so a verb pays only for the SDK of the cloud it touches.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.automation import PulumiBackend
    from gpufleet.infra.images import BakedRecord


class Backend(Protocol):
    """What ``up``, ``status`` and ``down`` need from a provider."""

    kind: str

    # What of a cluster this machine may hold besides its state folder (``{name}``: the cluster's); "" where
    # nothing: the state folder alone says the cluster exists (``gpufleet.lifecycle.known``).
    kept_without_state: str

    def check_credentials(self, spec: ClusterSpec) -> None:
        """Raise ``EnvironmentProblem`` when the provider's credentials are missing (calls nothing)."""

    def found_without_state(self, spec: ClusterSpec) -> list[str]:
        """What of the cluster this machine holds besides its state folder (``kept_without_state``)."""

    def software_overrides(self, spec: ClusterSpec) -> dict[str, Any]:
        """Keys of the spec's ``software`` block that this backend decides itself (``with_software``)."""

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: BakedRecord | None = None,
    ) -> Inventory:
        """Make (or keep) the cluster's machines and return the inventory. ``baked``: the image its new
        nodes boot, as the pipeline chose it (``Baker.newest``); None: the base image."""

    def status(self, spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
        """What the provider knows about the cluster (merged into ``gpufleet status``)."""

    def destroy(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """Remove what the cluster made; return what was removed (the state folder is not touched)."""

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """What is still there for the cluster after ``destroy`` (empty when nothing is)."""

    def forget(self, spec: ClusterSpec, state: ClusterState) -> list[str]:
        """Drop the provider's own record of the cluster (a Pulumi stack), once nothing is left."""

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        """How Ansible reaches the nodes (user, key, SSH options)."""


class _Entry(NamedTuple):
    module: str  # the provider folder; it exports ``backend``
    # Whether it has a Pulumi program (``gpufleet plan``, ``stacks/``).
    pulumi: bool
    # Whether its node images are baked in the cloud by a builder stack of its own (``gpufleet.bake.cloud``,
    # the backend's ``images``). Azure has a Pulumi program and no builder yet (docs/azure.md, "Images").
    bakes_in_cloud: bool = False
    # Whether its node images are baked on this machine, in podman's store (``gpufleet.bake.local``);
    # ``gpufleet image list`` and ``delete`` without a spec look there. Neither: nothing is baked.
    bakes_here: bool = False
    # Whether ``GPUFLEET_CONFIGURE_FROM=auto`` runs Ansible on the head (``gpufleet.configure.relay``): the
    # providers whose nodes gpufleet reaches through a tunnel per connection (SSM, IAP), often from a
    # 2-core CI runner, where the head pays from the first nodes (docs/benchmarks.md, "Configure at fleet
    # scale": pushing costs the runner 6.6 s of CPU per added node, the head design 2.4-3.4 s in all).
    # Local and bare-metal clusters keep Ansible on the machine that runs gpufleet.
    head_by_default: bool = False
    # Fields of the spec this backend changes on a running cluster besides ``gpufleet.spec.drift.IN_PLACE``
    # (``gpufleet up`` applies them; a change elsewhere needs the cluster made again: ``up --replace``).
    in_place: tuple[str, ...] = ()


BACKENDS: dict[str, _Entry] = {
    # Local: the nodes' authorized_keys is a file up rewrites in place (bind-mounted); allowed_cidrs unused.
    "local": _Entry("gpufleet.infra.local", pulumi=False, bakes_here=True, in_place=("access",)),
    # Bare metal makes nothing: up reads the site's inventory again and configure applies the rest; only
    # another inventory (provider.inventory) is another cluster.
    "baremetal": _Entry(
        "gpufleet.infra.baremetal",
        pulumi=False,
        in_place=("node_groups", "fabric", "filesystem", "access"),
    ),
    "aws": _Entry("gpufleet.infra.aws", pulumi=True, bakes_in_cloud=True, head_by_default=True),
    "gcp": _Entry("gpufleet.infra.gcp", pulumi=True, bakes_in_cloud=True, head_by_default=True),
    "azure": _Entry("gpufleet.infra.azure", pulumi=True),
    # Kubernetes makes no node either: up surveys the handed-over cluster again, and each validate makes its
    # pods from the spec (the image); another kubeconfig, context (provider) or namespace is another cluster.
    "kubernetes": _Entry(
        "gpufleet.infra.kubernetes",
        pulumi=False,
        in_place=("node_groups", "fabric", "filesystem", "access", "scheduler.kubernetes.image"),
    ),
}
PULUMI_KINDS = tuple(kind for kind, entry in BACKENDS.items() if entry.pulumi)
HEAD_BY_DEFAULT = tuple(kind for kind, entry in BACKENDS.items() if entry.head_by_default)


def backend_for(spec: ClusterSpec) -> Backend:
    """The backend of the spec's provider."""
    return backend_of(spec.provider.kind)


def backend_of(kind: str) -> Backend:
    """The backend of a provider kind."""
    return importlib.import_module(BACKENDS[kind].module).backend


def pulumi_backend_of(kind: str) -> PulumiBackend:
    """The backend of a cloud with a Pulumi program (``PULUMI_KINDS``)."""
    assert BACKENDS[kind].pulumi, f"{kind} has no Pulumi program"
    return cast("PulumiBackend", backend_of(kind))
