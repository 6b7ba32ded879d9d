"""The stack outputs: what every cloud program exports and the inventory reads, as one typed model.

``gpufleet.infra.outputs`` exports these keys (``OUTPUT_KEYS``) from each cloud's component;
``from_stack_outputs`` validates the outputs of a stack (``pulumi stack output --json``, the
Automation API's, the offline plan's) against ``StackOutputs`` before it builds the inventory. A host of
the outputs is an inventory ``Host`` whose ``address`` may be left out (then it is the private IP): a
field added to ``Host`` is a field of the stack outputs too; fill it in ``infra.outputs.host_record``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.inventory.model import Connection, Host, Inventory
from gpufleet.spec.model import FabricKind


class StackHost(Host):
    # Wider than Host's on purpose: a stack host may leave its address out (from_stack_outputs fills it in).
    address: str | None = Field(default=None, description="where Ansible connects; default: private_ip")  # type: ignore[assignment]


class StackOutputs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str
    # The cluster's id (gpufleet.state.new_cluster_id), tagged on its resources; None in outputs written
    # before ids or by hand.
    cluster_id: str | None = None
    provider: str
    # Every program exports region, zone, expires_at and head_node (export_outputs requires each key);
    # the inventory does not need them, so outputs written by hand may leave them out.
    region: str | None = None
    zone: str | None = None
    fabric: FabricKind
    expires_at: str | None = Field(default=None, description="ISO 8601 in UTC, e.g. 2026-11-23T09:00:00Z")
    head_node: str | None = Field(default=None, description="the name of the controller/login host")
    hosts: list[StackHost] = Field(min_length=1)
    filesystem: dict[str, Any] = Field(default_factory=lambda: {"kind": "none"})
    baked_image_hash: str | None = Field(
        default=None,
        description="the content hash of the baked image every node boots (gpufleet image build); null: none",
    )
    boot_configure: bool = Field(
        default=False,
        description="every node has its facts and configures itself at boot (gpufleet.inventory.node_facts)",
    )


OUTPUT_KEYS: tuple[str, ...] = tuple(StackOutputs.model_fields)


def from_stack_outputs(
    outputs: dict[str, Any] | StackOutputs, *, connection: Connection | None = None
) -> Inventory:
    """Build the inventory from a cloud stack's outputs (``StackOutputs``, validated here when a dict).
    It lives beside the outputs' model, above ``inventory.model``: the model imports nothing of this
    module (tests/test_import_cycles.py)."""
    stack = outputs if isinstance(outputs, StackOutputs) else StackOutputs.model_validate(outputs)
    hosts = [
        Host(**host.model_dump(exclude={"address"}), address=host.address or host.private_ip)
        for host in stack.hosts
    ]
    return Inventory(
        cluster=stack.cluster,
        provider=stack.provider,
        fabric=stack.fabric,
        hosts=hosts,
        filesystem=stack.filesystem or {"kind": "none"},
        connection=connection or Connection(),
        # configure skips the install phase while this is the hash of the roles and pins now.
        baked_image_hash=stack.baked_image_hash or None,
        boot_configure=stack.boot_configure and bool(stack.baked_image_hash),
    )
