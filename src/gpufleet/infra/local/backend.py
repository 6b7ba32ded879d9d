"""``backend`` for ``provider: local``: a real multi-node cluster of podman containers on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.local.cluster import LocalCluster, software_overrides
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter, SilentReporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.backend import Backend
    from gpufleet.infra.images import BakedRecord


class LocalBackend:
    kind = "local"
    kept_without_state = "podman container, network or volume labelled gpufleet.cluster={name}"

    def check_credentials(self, spec: ClusterSpec) -> None:
        """No credentials. The host's prerequisites are checked where they are used: podman, runc and root
        when ``up`` starts podman (``infra.local.podman.Podman``), the cluster's size against this machine by
        preflight's ``local_fits_host``."""

    def found_without_state(self, spec: ClusterSpec) -> list[str]:
        """Podman containers, networks and volumes labelled for the cluster: its ``leftovers`` (one source
        of truth for what a local cluster is made of), so ``down`` finds a cluster whose state is lost."""
        try:
            return self.leftovers(spec, ClusterState.for_name(spec.name), SilentReporter())
        except EnvironmentProblem:  # no podman here (or not root): then no podman object of it either
            return []

    def software_overrides(self, spec: ClusterSpec) -> dict[str, Any]:
        """No NVIDIA repository on a podman node: a local GPU stack always comes from PyPI."""
        return software_overrides(spec)

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: BakedRecord | None = None,
    ) -> Inventory:
        cluster = LocalCluster(spec, state, reporter)
        return cluster.up() if baked is None else cluster.up(image=baked.ref, digest=baked.digest)

    def status(self, spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
        return LocalCluster(spec, state, SilentReporter()).status()

    def destroy(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        return LocalCluster(spec, state, reporter).destroy()

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        return LocalCluster(spec, state, reporter).leftovers()

    def forget(self, spec: ClusterSpec, state: ClusterState) -> list[str]:
        return []

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        return LocalCluster(spec, state, SilentReporter()).connection()


# The table's row: the type checker holds it to the ``Backend`` protocol.
backend: Backend = LocalBackend()
