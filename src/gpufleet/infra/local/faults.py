"""Faults on purpose, on a real local cluster: make one node's link slow, as a bad cable or NIC would.

``slow_link`` puts a token-bucket filter on the node's eth0 (``tc qdisc replace dev eth0 root tbf``), so
everything the node sends is capped at ``rate``. It needs the nodes started with CAP_NET_ADMIN
(``provider.net_admin: true``). ``netem`` (delay, loss) is not available: the host kernel has no
sch_netem; a rate limit is (see docs/local.md and docs/reliability.md).
"""

from __future__ import annotations

from gpufleet.errors import ProvisionError, SpecError
from gpufleet.infra.local.cluster import cache_dir, plan_nodes
from gpufleet.infra.local.podman import Podman
from gpufleet.spec.model import ClusterSpec, LocalProvider, Role

DEFAULT_RATE = "50mbit"
MIN_NODES_FOR_BISECTION = 3  # with a good partner left for each suspect


def slow_node_target(spec: ClusterSpec) -> str:
    """The node the slow-node demo slows (the last compute node), or ``SpecError`` saying what the spec
    lacks, before anything is created."""
    provider = spec.provider
    if not isinstance(provider, LocalProvider):
        raise SpecError("--slow-node works on the local backend only (it runs tc inside a podman node)")
    if not provider.net_admin:
        raise SpecError(
            "--slow-node needs nodes that may change their own link: set provider.net_admin: true",
            hint="see examples/local-slow-node.yaml",
        )
    compute = [node.name for node in plan_nodes(spec) if Role.COMPUTE in node.roles]
    if len(compute) < MIN_NODES_FOR_BISECTION:
        raise SpecError(
            f"--slow-node needs at least {MIN_NODES_FOR_BISECTION} compute nodes (the spec has "
            f"{len(compute)}) so the search can pair the slow one with a good partner",
            hint="see examples/local-slow-node.yaml (4 compute nodes)",
        )
    return compute[-1]


def slow_link(node: str, rate: str = DEFAULT_RATE) -> str:
    """Cap what ``node`` sends at ``rate``; returns the qdisc as ``tc`` shows it afterwards."""
    podman = Podman(cache_dir())
    shape = ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf"]
    podman.run(
        "exec",
        node,
        *shape,
        "rate",
        rate,
        "burst",
        "32kbit",
        "latency",
        "50ms",
        what=f"rate-limiting {node}'s eth0 to {rate} (needs provider.net_admin: true)",
    )
    shown = podman.run("exec", node, "tc", "qdisc", "show", "dev", "eth0", what="reading the qdisc").stdout
    if "tbf" not in shown:
        raise ProvisionError(f"tc on {node} did not take: eth0 shows {shown.strip()!r}")
    return shown.strip()
