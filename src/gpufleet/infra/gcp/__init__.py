"""``provider: gcp``: the Pulumi component of a GPU cluster on GCP, its backend and its offline mocks.

Modules: ``backend.py`` (what ``gpufleet up/status/down`` drive), ``component.py`` (the component),
``network.py`` (VPCs, firewalls, NAT), ``filesystem.py`` (Managed Lustre or Filestore), ``compute.py``
(placement policies, images, VMs), ``mocks.py``, ``leftovers.py``. The GCP facts it shares with the
preflight checks live in ``gpufleet.catalog.gcp``.
"""

from gpufleet.infra.gcp.backend import backend
from gpufleet.infra.gcp.component import TYPE_TOKEN, GpuClusterGcp, GpuClusterGcpArgs
from gpufleet.infra.gcp.mocks import GcpMockCloud

__all__ = ["TYPE_TOKEN", "GcpMockCloud", "GpuClusterGcp", "GpuClusterGcpArgs", "backend"]
