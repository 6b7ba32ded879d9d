"""The physical bound on a collective's bus bandwidth, and the floor a type with no baseline is held to.

Let B be the node's GPU-fabric bandwidth in GB/s (the catalog's ``fabric.gpu_fabric_gbps`` or
``bandwidth_gbps``, divided by 8) and n the ranks of the run (anchors-2026-11-27 section 5.1):

- all_reduce, ring, three nodes or more: each node sends and receives 2(n-1)/n x S over the network for a
  busbw of 2(n-1)/n x S / t, so busbw <= B;
- all_reduce on two nodes (tree or NVLS-tree): only S crosses the network, so busbw <= 2(n-1)/n x B;
- all_gather, reduce_scatter, and the other collectives: busbw <= about B at any node count;
- in-network reduction (SHARP on InfiniBand, NVLS over a multi-node NVLink domain) lifts all_reduce above
  the fabric's bound: the bound is then stated, not held against the run. EFA has none (aws-ofi-nccl
  exports no CollNet symbol: awslabs/awsome-distributed-ai@8dd050d micro-benchmarks/nccl-tests/
  README-gb200.md).

One node uses no fabric: no bound.

A type whose fabric is known but that has no published baseline for the collective is held to an expected
figure of f x bound, f being the fraction of its bound that a published run on a comparable fabric reached
(the catalog's ``fabric_references``; a fabric kind with none takes the lowest fraction of those listed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.catalog import Catalog, InstanceType
from gpufleet.spec.model import FabricKind

# The fabrics with in-network reduction NCCL can use for all_reduce (CollNet / SHARP).
IN_NETWORK: dict[FabricKind, str] = {
    FabricKind.INFINIBAND: "InfiniBand can reduce in the switches (SHARP, NCCL CollNet), which lifts "
    "all_reduce above this bound",
}


@dataclass(frozen=True)
class Bound:
    """The most busbw the fabric can carry for one collective on one node count."""

    gbps: float  # GB/s
    fabric_gbps: float  # B, GB/s
    formula: str  # how it was derived, for the reader
    in_network: str | None = None  # set where the fabric (or an NVLink domain) can exceed it

    def to_json(self) -> dict[str, Any]:
        return {
            "busbw": round(self.gbps, 2),
            "fabric_busbw": round(self.fabric_gbps, 2),
            "formula": self.formula,
            "in_network": self.in_network,
        }


def bound(item: InstanceType, collective: str, nodes: int) -> Bound | None:
    """The physical bound for ``collective`` on ``nodes`` nodes of ``item``; None on one node."""
    if nodes < 2:
        return None
    fabric = item.gpu_fabric_gbps / 8
    ranks = nodes * max(item.gpu_count, 1)
    in_network = None
    if collective == "all_reduce":
        in_network = IN_NETWORK.get(item.fabric.kind)
        domain = item.fabric.nvlink_domain_vms
        if domain is not None and nodes <= domain:
            in_network = (
                f"the {nodes} nodes can share one multi-node NVLink domain ({domain} VMs): NVLS carries "
                "all_reduce over NVLink, above this bound"
            )
        if nodes == 2:
            factor = 2 * (ranks - 1) / ranks
            formula = f"2 nodes, tree: 2(n-1)/n x B = {factor:.4g} x {fabric:g}"
            return Bound(fabric * factor, fabric, formula, in_network)
        return Bound(fabric, fabric, f"ring over {nodes} nodes: B = {fabric:g}", in_network)
    return Bound(fabric, fabric, f"{collective}: about B = {fabric:g}", None)


@dataclass(frozen=True)
class Derived:
    """An expected figure from the bound: ``fraction`` x bound, the fraction a published run reached."""

    expected: float
    fraction: float
    reference: str  # which run set the fraction, for the reader
    source: str  # the run's catalog source id


def fraction_of(catalog: Catalog, kind: FabricKind) -> tuple[float, str, str] | None:
    """(fraction of its bound, description, source id) of the published run the catalog names for ``kind``;
    for a kind with none, the lowest of the runs it names."""
    found = catalog.reference_baseline(kind)
    if found is not None:
        item, base = found
        limit = bound(item, base.collective.value, base.nodes)
        assert limit is not None  # references are multi-node (FabricReference.nodes >= 2)
        what = (
            f"{base.busbw_gbps:g} of {limit.gbps:.4g} GB/s reached by {base.collective.value} on "
            f"{base.nodes} x {item.name}"
        )
        return base.busbw_gbps / limit.gbps, what, base.source
    options = [fraction_of(catalog, other) for other in catalog.fabric_references if other is not kind]
    known = [option for option in options if option is not None]
    if not known:
        return None
    low = min(known, key=lambda option: option[0])
    return low[0], f"no published {kind.value} run: the lowest fraction of any fabric's, {low[1]}", low[2]


def derived_expectation(catalog: Catalog, item: InstanceType, collective: str, nodes: int) -> Derived | None:
    """The expected figure for a type with no baseline: the comparable fabric's fraction x this bound."""
    limit = bound(item, collective, nodes)
    if limit is None or item.gpu is None:
        return None
    found = fraction_of(catalog, item.fabric.kind)
    if found is None:
        return None
    fraction, what, source = found
    return Derived(fraction * limit.gbps, fraction, what, source)
