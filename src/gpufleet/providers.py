"""The one table of the providers: a spec's ``provider.kind`` -> the folder whose ``backend`` makes, shows
and destroys its machines (``gpufleet.infra.backend.backend_of`` imports it on first use), and the columns
where the providers differ.

A leaf (it imports nothing of gpufleet): infra's backend table, preflight's ``head_size`` check, the
configure relay, bake and lifecycle all read the same rows without importing infra's provider code, so no
import runs from preflight or configure up into infra (tests/test_import_cycles.py). This is the only
place that names the providers; nothing else branches on ``provider.kind``.
"""

from __future__ import annotations

from typing import NamedTuple


class ProviderEntry(NamedTuple):
    """One provider's row: where its backend lives and the columns where providers differ."""

    module: str  # the provider folder; it exports ``backend``
    # Whether it has a Pulumi program (``gpufleet plan``, ``stacks/``).
    pulumi: bool
    # Whether its node images are baked in the cloud by a builder stack of its own (``gpufleet.bake.cloud``,
    # the backend's ``images``). Azure has a Pulumi program and no builder yet (docs/azure.md, "Images").
    bakes_in_cloud: bool = False
    # Whether its node images are baked on this machine, in podman's store (``gpufleet.bake.local``);
    # ``gpufleet image list`` and ``delete`` without a spec look there. Neither: nothing is baked.
    bakes_here: bool = False
    # Whether ``GPUFLEET_CONFIGURE_FROM=auto`` runs Ansible on the head (``gpufleet.configure.relay``): the
    # providers whose nodes gpufleet reaches through a tunnel per connection (SSM, IAP), often from a
    # 2-core CI runner, where the head pays from the first nodes (docs/benchmarks.md, "Configure at fleet
    # scale": pushing costs the runner 6.6 s of CPU per added node, the head design 2.4-3.4 s in all).
    # Local and bare-metal clusters keep Ansible on the machine that runs gpufleet.
    head_by_default: bool = False
    # Fields of the spec this backend changes on a running cluster besides ``gpufleet.spec.drift.IN_PLACE``
    # (``gpufleet up`` applies them; a change elsewhere needs the cluster made again: ``up --replace``).
    in_place: tuple[str, ...] = ()


BACKENDS: dict[str, ProviderEntry] = {
    # Local: the nodes' authorized_keys is a file up rewrites in place (bind-mounted); allowed_cidrs unused.
    "local": ProviderEntry("gpufleet.infra.local", pulumi=False, bakes_here=True, in_place=("access",)),
    # Bare metal makes nothing: up reads the site's inventory again and configure applies the rest; only
    # another inventory (provider.inventory) is another cluster.
    "baremetal": ProviderEntry(
        "gpufleet.infra.baremetal",
        pulumi=False,
        in_place=("node_groups", "fabric", "filesystem", "access"),
    ),
    "aws": ProviderEntry("gpufleet.infra.aws", pulumi=True, bakes_in_cloud=True, head_by_default=True),
    "gcp": ProviderEntry("gpufleet.infra.gcp", pulumi=True, bakes_in_cloud=True, head_by_default=True),
    "azure": ProviderEntry("gpufleet.infra.azure", pulumi=True),
    # Kubernetes makes no node either: up surveys the handed-over cluster again, and each validate makes its
    # pods from the spec (the image); another kubeconfig, context (provider) or namespace is another cluster.
    "kubernetes": ProviderEntry(
        "gpufleet.infra.kubernetes",
        pulumi=False,
        in_place=("node_groups", "fabric", "filesystem", "access", "scheduler.kubernetes.image"),
    ),
}
PULUMI_KINDS = tuple(kind for kind, entry in BACKENDS.items() if entry.pulumi)
HEAD_BY_DEFAULT = tuple(kind for kind, entry in BACKENDS.items() if entry.head_by_default)
