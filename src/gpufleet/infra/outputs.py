"""Stack outputs: the stable keys every cloud program exports, in the inventory's shape.

The shape is one typed model, ``gpufleet.inventory.stack.StackOutputs``, which
``Inventory.from_stack_outputs`` validates, so everything after provisioning is cloud-blind. Keys:

- ``cluster``, ``provider``, ``region``, ``zone``, ``fabric``, ``expires_at``
- ``head_node``: the name of the controller/login host
- ``hosts``: a list of ``{name, roles, private_ip, instance_type, gpus, gpu_model, fabric_interfaces,
  cpus, memory_mb}``
- ``filesystem``: ``{kind, mount_point, ...}`` with ``dns_name`` and ``mount_name`` for FSx for Lustre,
  ``mount_source`` for Managed Lustre and Filestore (what ``mount`` takes); ``{kind: none}`` without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.catalog import InstanceType
from gpufleet.inventory.stack import OUTPUT_KEYS
from gpufleet.spec.model import Role

# slurmd drains a node that declares more memory than it finds; leave room for the OS and the driver.
_SLURM_MEMORY_FRACTION = 0.92


def slurm_memory_mb(item: InstanceType | None, default_mb: int = 4096) -> int:
    if item is None or item.memory_gib is None:
        return default_mb
    return int(item.memory_gib * 1024 * _SLURM_MEMORY_FRACTION)


def host_record(
    *,
    name: str,
    roles: list[Role],
    private_ip: Any,
    instance_type: str,
    item: InstanceType | None,
    fabric_interfaces: int,
) -> dict[str, Any]:
    """One entry of ``hosts``; ``private_ip`` may be a ``pulumi.Output``."""
    return {
        "name": name,
        "roles": [role.value for role in roles],
        "private_ip": private_ip,
        "instance_type": instance_type,
        "gpus": item.gpu_count if item else 0,
        "gpu_model": item.gpu.model if item and item.gpu else None,
        "fabric_interfaces": fabric_interfaces,
        "cpus": item.cpus if item and item.cpus else 2,
        "memory_mb": slurm_memory_mb(item),
    }


__all__ = ["OUTPUT_KEYS", "export_outputs", "host_record", "slurm_memory_mb"]


def export_outputs(outputs: Mapping[str, Any]) -> None:
    """Export a program's outputs under the stable keys (called only from the stack entry point)."""
    import pulumi

    missing = [key for key in OUTPUT_KEYS if key not in outputs]
    if missing:
        raise KeyError(f"stack outputs lack {', '.join(missing)}")
    for key in OUTPUT_KEYS:
        pulumi.export(key, outputs[key])
