"""The spec's ``software`` block as the inventory's ``gpufleet_software``, which every role reads, with what
the spec's backend decides itself (``Backend.software_overrides``: local takes its GPU stack from PyPI)."""

from __future__ import annotations

from gpufleet.infra.backend import backend_for
from gpufleet.inventory.model import Inventory
from gpufleet.spec.model import ClusterSpec


def with_software(inventory: Inventory, spec: ClusterSpec) -> Inventory:
    """The inventory with the spec's software settings.

    A bare-metal inventory may carry its own ``gpufleet_software``; the spec's values win, key by key, and
    the backend's overrides win over both.
    """
    software = {
        **inventory.software,
        **spec.software.model_dump(mode="json"),
        **backend_for(spec).software_overrides(spec),
    }
    return inventory.model_copy(update={"software": software})
