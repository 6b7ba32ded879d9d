"""The GCP cluster program: ``GpuClusterGcp`` (a Pulumi component) and its offline mocks (``mocks.py``).

Modules: ``component.py`` (the component and its preflight), ``network.py`` (VPCs, firewalls, NAT),
``filesystem.py`` (Managed Lustre or Filestore), ``compute.py`` (placement policies, images, VMs).
"""

from gpufleet.infra.gcp.component import TYPE_TOKEN, GpuClusterGcp, GpuClusterGcpArgs

__all__ = ["TYPE_TOKEN", "GpuClusterGcp", "GpuClusterGcpArgs"]
