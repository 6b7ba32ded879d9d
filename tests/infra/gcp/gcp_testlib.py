"""Helpers of the GCP program's tests: specs per machine type, and what a recorded run holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.catalog import InstanceType, load_catalog
from gpufleet.catalog.gcp import series_of
from gpufleet.infra.plan import PlannedResource
from gpufleet.spec.model import ClusterSpec

CREATED_AT = datetime(2026, 11, 22, 9, 30, tzinfo=UTC)


def gcp_gpu_types() -> list[InstanceType]:
    """Every GCP machine type with GPUs in the catalog (the tests iterate these, never a fixed list)."""
    return [item for item in load_catalog().for_provider("gcp") if item.gpu is not None]


def gcp_spec(instance_type: str = "a3-megagpu-8g", **changes: Any) -> ClusterSpec:
    """A small valid GCP spec around one compute type; ``changes`` replace top-level keys."""
    item = load_catalog().get(instance_type)
    assert item is not None, f"{instance_type} is not in the catalog"
    # A3 Ultra and A4 have no on-demand capacity: their groups run on Spot (which keeps compact placement).
    capacity = {} if series_of(instance_type).on_demand else {"capacity": {"mode": "spot"}}
    data: dict[str, Any] = {
        "name": "t1",
        "provider": {
            "kind": "gcp",
            "project": "test-project-1",
            "region": "us-central1",
            "zone": "us-central1-a",
        },
        "node_groups": [
            {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
            {"name": "gpu", "roles": ["compute"], "instance_type": instance_type, "count": 2, **capacity},
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

    def of_type(self, type_: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> PlannedResource:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"expected one resource named {name}, got {[r.urn for r in matches]}"
        return matches[0]

    def by_output(self, type_: str, key: str, value: str) -> PlannedResource:
        """The resource of ``type_`` whose mock-computed ``key`` (selfLink, id) is ``value``."""
        for resource in self.of_type(type_):
            if _computed_ids(resource).get(key) == value:
                return resource
        raise AssertionError(f"no {type_} with {key} {value}")


def _computed_ids(resource: PlannedResource) -> dict[str, str]:
    """The id and self link the mocks give a network or subnetwork (from its name and inputs)."""
    project = resource.inputs.get("project")
    name = resource.inputs.get("name")
    if resource.type == "gcp:compute/network:Network":
        path = f"projects/{project}/global/networks/{name}"
    elif resource.type == "gcp:compute/subnetwork:Subnetwork":
        path = f"projects/{project}/regions/{resource.inputs.get('region')}/subnetworks/{name}"
    else:
        return {}
    return {"id": path, "selfLink": f"https://www.googleapis.com/compute/v1/{path}"}
