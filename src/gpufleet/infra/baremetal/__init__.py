"""``provider: baremetal``: the machines exist; ``up`` reads the user's inventory, nothing is destroyed."""

from gpufleet.infra.baremetal.backend import backend

__all__ = ["backend"]
