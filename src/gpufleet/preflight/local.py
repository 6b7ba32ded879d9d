"""Checks for the local podman backend: the cluster must fit on this one machine."""

from __future__ import annotations

import os
from collections.abc import Iterator

from gpufleet.catalog import Catalog
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec, LocalProvider

MAX_LOCAL_NODES = 16


def _host_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError):
        return None


@check("local_fits_host", providers=("local",))
def local_fits_host(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = spec.provider
    assert isinstance(provider, LocalProvider)
    nodes = sum(g.count for g in spec.node_groups)
    if nodes > MAX_LOCAL_NODES:
        yield Finding(
            Severity.ERROR,
            "local_fits_host",
            "node_groups",
            f"{nodes} local nodes asked; the local backend runs at most {MAX_LOCAL_NODES} containers "
            "on one machine. Lower the compute count",
        )
    cpus = os.cpu_count() or 1
    if provider.node_cpus > cpus:
        yield Finding(
            Severity.ERROR,
            "local_fits_host",
            "provider.node_cpus",
            f"each node declares {provider.node_cpus} CPUs to Slurm but this machine has {cpus}; "
            f"slurmd would drain the node. Set node_cpus to {cpus} or less",
        )
    memory = _host_memory_mb()
    if memory is not None and provider.node_memory_mb > memory // 2:
        yield Finding(
            Severity.ERROR,
            "local_fits_host",
            "provider.node_memory_mb",
            f"each node declares {provider.node_memory_mb} MB to Slurm; this machine has {memory} MB. "
            f"Set node_memory_mb to {memory // 4} or less",
        )
