"""The instance catalog (data in instances.yaml)."""

from gpufleet.catalog.model import (
    Baseline,
    Catalog,
    FabricInfo,
    Gpu,
    InstanceType,
    NodeFloor,
    Source,
    load_catalog,
)

__all__ = ["Baseline", "Catalog", "FabricInfo", "Gpu", "InstanceType", "NodeFloor", "Source", "load_catalog"]
