"""The backends behind the provider table: ``backend_of`` turns a spec's ``provider.kind`` into its backend.

Every provider folder (``gpufleet.infra.local``, ``baremetal``, ``aws``, ``gcp``, ``azure``) exports
``backend``, an object with the methods of ``Backend``; every backend returns the same ``Inventory``. The
clouds' backends are ``PulumiBackend``s (``gpufleet.infra.pulumi_stack``): the same cloud-blind Automation API
driver, with the cloud's own component, mocks, stack config, credentials check, SSH route, leftover finder
and baked images. The providers and their columns (a Pulumi program, images baked in the cloud or on this
machine, configure from the head) are the table of ``gpufleet.providers``, a leaf below infra that preflight
and configure read too. Outside the provider folders, code reads a column of that table rather than naming a
provider: tests/infra/test_backend.py finds any comparison with a provider's name and lists the few places
allowed one, each with its reason (it cannot see a name held in a set). The bakers stand above this table
(``gpufleet.bake.baker`` builds one per backend from it).

Provider folders are imported on first use, so a verb pays only for the SDK of the cloud it touches.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter
from gpufleet.providers import BACKENDS
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.images import BakedRecord
    from gpufleet.infra.pulumi_stack import PulumiBackend


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
