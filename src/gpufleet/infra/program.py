"""The one Pulumi program of gpufleet: a spec in, the cloud's component out, outputs in the common shape.

``stacks/__main__.py`` (``pulumi up`` from CI), the Automation API driver (``gpufleet up``) and the
offline plan (``gpufleet plan``) all call ``cluster_program``; only the plan swaps the engine for mocks.
Cloud SDKs are imported here lazily, so ``gpufleet check`` and ``--help`` stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpufleet.catalog import load_catalog
from gpufleet.errors import SpecError
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import MockCloud, Plan, run_offline
from gpufleet.infra.pulumi_stack import PulumiBackend
from gpufleet.infra.tags import PLAN_CLUSTER_ID
from gpufleet.providers import PULUMI_KINDS
from gpufleet.spec.model import ClusterSpec


def pulumi_backend(spec: ClusterSpec) -> PulumiBackend:
    """The backend of a spec whose provider has a Pulumi program, or ``SpecError``."""
    if spec.provider.kind not in PULUMI_KINDS:
        raise SpecError(
            f"provider '{spec.provider.kind}' has no Pulumi program; only {', '.join(PULUMI_KINDS)} do",
            hint="a provider without one makes its nodes itself or is handed them: run 'gpufleet up'",
        )
    return pulumi_backend_of(spec.provider.kind)


def cluster_program(
    spec: ClusterSpec,
    created_at: datetime,
    ssh_keys: Sequence[str] = (),
    baked: CloudImage | None = None,
    cluster_id: str = PLAN_CLUSTER_ID,
) -> dict[str, Any]:
    """Register the cluster's resources in the current Pulumi stack; return its outputs (common shape).

    ``ssh_keys`` are public keys authorized on every node besides the spec's own; ``baked`` is the image
    of the spec's roles and pins that every node boots (``gpufleet.bake.cloud.find_baked_in_program``), if
    there is one; ``cluster_id`` the cluster's id (``gpufleet.state``; the offline plan's placeholder).
    """
    return pulumi_backend(spec).program(spec, created_at, tuple(ssh_keys), baked, cluster_id)


def mock_cloud(spec: ClusterSpec) -> MockCloud:
    return pulumi_backend(spec).mock_cloud(spec)


def plan_spec(spec: ClusterSpec, created_at: datetime) -> Plan:
    """Run the cluster's program offline under mocks and return what it would create."""
    cloud = mock_cloud(spec)
    return run_offline(lambda: cluster_program(spec, created_at), cloud, stack=spec.name)


def hourly_cost(spec: ClusterSpec) -> tuple[float | None, list[dict[str, Any]]]:
    """The cluster's on-demand cost per hour from the catalog, and the per-group breakdown.

    The total is None when any group's price is unknown (it is never silently under-counted).
    """
    catalog = load_catalog()
    lines: list[dict[str, Any]] = []
    total: float | None = 0.0
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        price = item.price_per_hour_usd if item else None
        lines.append(
            {
                "group": group.name,
                "instance_type": group.instance_type,
                "count": group.count,
                "price_per_hour_usd": price,
                "cost_per_hour_usd": round(price * group.count, 4) if price is not None else None,
                "price_region": item.price_region if item else None,
            }
        )
        total = None if total is None or price is None else total + price * group.count
    return (round(total, 2) if total is not None else None), lines
