"""Render a fabric role's /etc/gpufleet/nccl.env in Python, as Ansible renders it on a node.

The variables are the ones the node gets: the inventory (built from the catalog by gpufleet's own
``Inventory`` model), the defaults of ``nccl_env`` and of the fabric role, the fabric role's vars/main.yml,
the ``vars`` its configure.yml passes to ``nccl_env``, and what the node itself answers (facts and the
registered outputs the role reads, given by the caller). The template is rendered with ansible-core's
own templating, so filters and lazy variables behave as on the node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from factories import HEAD_ROLES, make_host, make_inventory
from gpufleet.inventory.model import Inventory
from gpufleet.spec.model import FabricKind, Software

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
TEMPLATE = ROLES / "nccl_env" / "templates" / "nccl.env.j2"
NODE = "gpu-0"


def _trust(value: Any) -> Any:
    """Role files are trusted templates in Ansible; mark them so here too."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trust(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trust(item) for item in value]
    return value


def _load(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else {}


def fabric_role(fabric: str, provider: str) -> str:
    """The role site.yml's Fabric play picks (the same conditions, restated for the tests)."""
    if fabric == "efa":
        return "efa"
    if fabric in ("tcpx", "tcpxo") or (fabric == "roce" and provider == "gcp"):
        return "gcp_gpudirect"
    if fabric in ("infiniband", "roce"):
        return "infiniband"
    return "ethernet"


def import_vars(role: str) -> dict[str, Any]:
    """The ``vars`` the role's configure.yml hands to nccl_env."""
    for task in yaml.safe_load((ROLES / role / "tasks" / "configure.yml").read_text(encoding="utf-8")):
        if task.get("ansible.builtin.import_role", {}).get("name") == "nccl_env":
            return dict(task.get("vars") or {})
    raise AssertionError(f"{role}/tasks/configure.yml does not import nccl_env")


def inventory(fabric: str, provider: str, instance_type: str, **facts: Any) -> Inventory:
    """A one-compute-node inventory as gpufleet writes it; fabric facts from the catalog unless given."""
    head = make_host("head", HEAD_ROLES, instance_type="head", cpus=4, memory_mb=4096)
    node = make_host(NODE, ip="10.0.0.2", instance_type=instance_type, cpus=8, memory_mb=8192, **facts)
    return make_inventory(
        [head, node],
        cluster="t",
        provider=provider,
        fabric=FabricKind(fabric),
        software=Software().model_dump(mode="json"),
    )


def node_vars(inv: Inventory) -> dict[str, Any]:
    """What Ansible knows about the compute node from the inventory alone."""
    data = inv.to_ansible()["all"]
    return {**data["vars"], **data["children"]["compute"]["hosts"][NODE]}


def render(inv: Inventory, node_answers: dict[str, Any] | None = None, hostname: str = NODE) -> str:
    """The nccl.env the fabric role writes on the compute node of ``inv``."""
    host = node_vars(inv)
    role = fabric_role(host["gpufleet_fabric"], host["gpufleet_provider"])
    variables: dict[str, Any] = {}
    variables.update(_trust(_load(ROLES / "nccl_env" / "defaults" / "main.yml")))
    variables.update(_trust(_load(ROLES / "nccl_env" / "vars" / "main.yml")))
    variables.update(_trust(_load(ROLES / role / "defaults" / "main.yml")))
    variables.update(_trust(_load(ROLES / role / "vars" / "main.yml")))
    variables.update(_trust(host))
    variables.update(_trust(import_vars(role)))
    variables.update(node_answers or {})
    variables.update({"inventory_hostname": hostname, "ansible_managed": "Ansible managed"})
    templar = Templar(loader=DataLoader(), variables=variables)
    return str(templar.template(trust_as_template(TEMPLATE.read_text(encoding="utf-8"))))
