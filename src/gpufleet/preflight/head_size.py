"""The head node against the fleet it configures: on aws and gcp a baked cluster's configure runs Ansible on
the controller (``gpufleet.configure.relay``, ``GPUFLEET_CONFIGURE_FROM=auto``), and its time is the
head's cores: about ``FIXED_S + N x CPU_PER_NODE_S / vCPUs`` for N compute nodes.

The figures are the local benchmark's (docs/benchmarks.md, "Configure at fleet scale", 2, 4, 8 and 15
compute nodes, 2026-11-25): 9.66 s of Ansible CPU per added node, the least-squares slope of the control
side's CPU in the push design (the head design's own per-node Ansible measured about 8 s, a difference of
two noisy columns, so the larger figure is used), and about 15 s fixed (three SSH calls, the upload, its
unpacking, Ansible's start). A cloud core is taken as fast as one of that machine's; docs/architecture.md
has the projection table this check applies to one spec.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from gpufleet.catalog import Catalog
from gpufleet.preflight.base import Finding, check
from gpufleet.providers import HEAD_BY_DEFAULT
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec

CHECK = "head_size"
CPU_PER_NODE_S = 9.66
FIXED_S = 15.0
# The bound issue 21 set for a configure at any fleet size.
BOUND_S = 600.0


def projected_configure_s(compute_nodes: int, head_vcpus: int) -> float:
    """Seconds a baked configure run from a head of ``head_vcpus`` takes for ``compute_nodes``."""
    return FIXED_S + compute_nodes * CPU_PER_NODE_S / head_vcpus


def vcpus_needed(compute_nodes: int) -> int:
    """The fewest head vCPUs that keep the projection within ``BOUND_S``."""
    return max(1, math.ceil(compute_nodes * CPU_PER_NODE_S / (BOUND_S - FIXED_S)))


# Where configure runs from the head by default: a column of the backend table.
@check(CHECK, providers=HEAD_BY_DEFAULT)
def head_size(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    head = spec.controller_group
    index = spec.node_groups.index(head)
    item = catalog.get(head.instance_type)
    if item is None or item.cpus is None:
        return  # instance_type_known says so
    nodes = spec.compute_count
    seconds = projected_configure_s(nodes, item.cpus)
    if seconds <= BOUND_S:
        return
    need = vcpus_needed(nodes)
    yield Finding(
        Severity.WARNING,
        CHECK,
        f"node_groups[{index}].instance_type",
        f"configure runs Ansible on the head node; {head.instance_type} has {item.cpus} vCPUs, about "
        f"{seconds / 60:.0f} min of configure for {nodes} compute nodes ({CPU_PER_NODE_S} s of Ansible "
        f"CPU per node over the head's vCPUs, docs/architecture.md 'Configure at fleet scale'): a head with "
        f"at least {need} vCPUs keeps it under {BOUND_S / 60:.0f} min",
    )
