"""Stack outputs: what every cloud program exports, built here from the spec and the catalog.

The keys and their types are one model, ``gpufleet.inventory.stack.StackOutputs`` (with ``OUTPUT_KEYS``, the
keys every program must export), which ``inventory.stack.from_stack_outputs`` validates, so everything after
provisioning is cloud-blind; read it there rather than a list here. What this module adds: the host record
of each node (``host_record``), whose GPU and fabric facts come from the catalog entry of its instance type,
and, for the image the program booted, its manifest (``catalog/images.yaml``): ``gpu_components`` (install or
verify per component, ``catalog.images.component_modes``) and ``gpu_paths`` (where the image keeps what it
ships). ``gpu_stack`` stays the one-word summary: "verify" where the image ships the driver, "install" on
other GPU nodes, "none" without GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.catalog import InstanceType
from gpufleet.catalog.images import component_modes, component_paths, manifest
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
    image: str | None = None,
) -> dict[str, Any]:
    """One entry of ``hosts``; ``private_ip`` may be a ``pulumi.Output``.

    ``image``: the manifest key (``catalog/images.yaml``) of the image the node boots, None when not
    known (a custom image): the GPU roles verify what the image ships and install the rest.
    """
    gpu = item.gpu if item else None
    shipped = manifest(image)
    if gpu is None:
        stack, components, paths = "none", {}, {}
    else:
        stack = "verify" if shipped is not None and shipped.ships("driver") else "install"
        components, paths = dict(component_modes(shipped)), component_paths(shipped)
    return {
        "name": name,
        "roles": [role.value for role in roles],
        "private_ip": private_ip,
        "instance_type": instance_type,
        "gpus": gpu.count if gpu else 0,
        "gpu_model": gpu.model if gpu else None,
        "gpu_arch": gpu.arch if gpu else None,
        "nvswitch": gpu.nvswitch if gpu else False,
        "gpu_stack": stack,
        "gpu_components": components,
        "gpu_paths": paths,
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
