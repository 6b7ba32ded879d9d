"""Helpers of the Azure program's tests: specs per VM size, and what a recorded run holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.catalog import InstanceType, load_catalog
from gpufleet.infra.plan import PlannedResource
from gpufleet.spec.model import ClusterSpec

CREATED_AT = datetime(2026, 11, 27, 9, 30, tzinfo=UTC)
SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
# An Arm64 Gen2 image in a Compute Gallery (GB200/GB300 have no marketplace HPC image URN).
ARM_IMAGE = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/images/providers/Microsoft.Compute/galleries/hpc/images/"
    "ubuntu-hpc-2404-arm64/versions/1.0.0"
)


def azure_gpu_types() -> list[InstanceType]:
    """Every Azure GPU size of the catalog (the tests iterate these, never a fixed list)."""
    return [item for item in load_catalog().for_provider("azure") if item.gpu is not None]


def azure_spec(instance_type: str = "Standard_ND96isr_H100_v5", **changes: Any) -> ClusterSpec:
    """A small valid Azure spec around one compute size; ``changes`` replace top-level keys."""
    item = load_catalog().get(instance_type)
    assert item is not None, f"{instance_type} is not in the catalog"
    provider: dict[str, Any] = {"kind": "azure", "subscription": SUBSCRIPTION, "location": "eastus"}
    if item.cpu_arch == "arm64":
        provider["image"] = {"id": ARM_IMAGE, "architecture": "Arm64", "os_release": "ubuntu-24.04"}
    count = item.fabric.nvlink_domain_vms or 2
    data: dict[str, Any] = {
        "name": "t1",
        "provider": provider,
        "node_groups": [
            {"name": "head", "roles": ["controller", "login"], "instance_type": "Standard_D8s_v5"},
            {"name": "gpu", "roles": ["compute"], "instance_type": instance_type, "count": count},
        ],
        "fabric": item.fabric.kind.value,
        "tags": {"team": "infra"},
    }
    data.update(changes)
    return ClusterSpec.model_validate(data)


@dataclass
class Recording:
    resources: list[PlannedResource]
    outputs: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    computed: dict[str, dict[str, Any]] = field(default_factory=dict)  # URN -> what the mocks computed

    def of_type(self, type_: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> PlannedResource:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"expected one resource named {name}, got {[r.urn for r in matches]}"
        return matches[0]

    def by_id(self, resource_id: str) -> PlannedResource:
        """The resource whose mock-computed ARM id is ``resource_id``."""
        for resource in self.resources:
            if self.computed.get(resource.urn, {}).get("id") == resource_id:
                return resource
        raise AssertionError(f"no resource with id {resource_id}")
