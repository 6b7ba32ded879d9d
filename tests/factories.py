"""The one builder of hosts and inventories for tests (issue 30's review, 5.8: the builder was written six
times). Importable as ``factories`` from every test folder: tests/conftest.py's folder is on the path.

``make_host`` fills what every host needs with the smallest honest values (one CPU, 1 GiB, instance type
``local``, the same address for Ansible and the cluster) and takes any ``Host`` field over them;
``make_inventory`` does the same for the cluster (``demo``, local, Ethernet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpufleet.inventory.model import Host, Inventory
from gpufleet.spec.model import FabricKind, Role

HEAD_ROLES = (Role.CONTROLLER, Role.LOGIN)


def make_host(
    name: str, roles: Iterable[Role] = (Role.COMPUTE,), *, ip: str = "10.0.0.1", **fields: Any
) -> Host:
    """Host ``name`` in ``roles`` at ``ip`` (its address and private IP unless ``fields`` set them)."""
    values: dict[str, Any] = {
        "address": ip,
        "private_ip": ip,
        "instance_type": "local",
        "cpus": 1,
        "memory_mb": 1024,
        **fields,
    }
    return Host(name=name, roles=list(roles), **values)


def make_inventory(hosts: Iterable[Host], **fields: Any) -> Inventory:
    """The inventory of ``hosts``: cluster ``demo``, local, Ethernet unless ``fields`` say otherwise."""
    values: dict[str, Any] = {"cluster": "demo", "provider": "local", "fabric": FabricKind.ETHERNET, **fields}
    return Inventory(hosts=list(hosts), **values)
