"""The cluster spec: model, units and loader."""

from gpufleet.spec.load import load_spec, parse_spec
from gpufleet.spec.model import (
    Access,
    AwsProvider,
    AzureProvider,
    BaremetalProvider,
    Capacity,
    CapacityMode,
    ClusterSpec,
    Collective,
    Fabric,
    FabricKind,
    GcpProvider,
    LocalProvider,
    NodeGroup,
    ProviderKind,
    Role,
    ValidationSpec,
)

__all__ = [
    "Access",
    "AwsProvider",
    "AzureProvider",
    "BaremetalProvider",
    "Capacity",
    "CapacityMode",
    "ClusterSpec",
    "Collective",
    "Fabric",
    "FabricKind",
    "GcpProvider",
    "LocalProvider",
    "NodeGroup",
    "ProviderKind",
    "Role",
    "ValidationSpec",
    "load_spec",
    "parse_spec",
]
