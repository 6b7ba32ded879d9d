"""``backend`` for ``provider: baremetal``: the user's own inventory (docs/inventory.md) is the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter
from gpufleet.spec.model import BaremetalProvider, ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.backend import Backend
    from gpufleet.infra.images import BakedRecord


def inventory_path(spec: ClusterSpec, spec_path: Path | None) -> Path:
    """``provider.inventory``, relative to the spec file's folder when not absolute."""
    assert isinstance(spec.provider, BaremetalProvider)
    path = Path(spec.provider.inventory).expanduser()
    if not path.is_absolute() and spec_path is not None:
        path = spec_path.parent / path
    return path


class BaremetalBackend:
    kind = "baremetal"
    kept_without_state = ""

    def check_credentials(self, spec: ClusterSpec) -> None:
        """No credentials: Ansible reaches the machines as the user's inventory says."""

    def found_without_state(self, spec: ClusterSpec) -> list[str]:
        return []

    def software_overrides(self, spec: ClusterSpec) -> dict[str, Any]:
        return {}

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: BakedRecord | None = None,
    ) -> Inventory:
        """The site's own inventory (nothing is made; bare metal bakes nothing, so ``baked`` is None)."""
        return Inventory.read(inventory_path(spec, spec_path))

    def status(self, spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
        return {}

    def destroy(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        return []

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        return []

    def forget(self, spec: ClusterSpec, state: ClusterState) -> list[str]:
        return []

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        return (
            Inventory.read(state.inventory_file).connection if state.inventory_file.exists() else Connection()
        )


# The table's row: the type checker holds it to the ``Backend`` protocol.
backend: Backend = BaremetalBackend()
