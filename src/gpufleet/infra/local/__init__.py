"""``provider: local``: a real multi-node cluster of podman containers on this machine.

Modules: ``backend.py`` (what ``gpufleet up/status/down`` drive), ``cluster.py`` (nodes, network, volume,
inventory), ``image.py`` (the node image), ``podman.py`` (the podman command).
"""

from gpufleet.infra.local.backend import backend

__all__ = ["backend"]
