"""``provider: azure``: the Pulumi component of a GPU cluster on Microsoft Azure, its backend and its mocks.

Modules: ``backend.py`` (what ``gpufleet up/status/down`` drive), ``component.py`` (the component),
``network.py`` (virtual network, subnets, NSG, NAT gateway, Bastion), ``compute.py`` (scale sets per
InfiniBand domain, NICs, VMs), ``filesystem.py`` (Azure Managed Lustre), ``mocks.py``, ``arm.py`` (Azure
Resource Manager's REST API), ``leftovers.py``, ``lustre_export.py``. The Azure facts it shares with the
preflight checks live in ``gpufleet.catalog.azure``.
"""

from gpufleet.infra.azure.backend import backend
from gpufleet.infra.azure.component import TYPE_TOKEN, GpuClusterAzure, GpuClusterAzureArgs
from gpufleet.infra.azure.mocks import AzureMockCloud

__all__ = ["TYPE_TOKEN", "AzureMockCloud", "GpuClusterAzure", "GpuClusterAzureArgs", "backend"]
