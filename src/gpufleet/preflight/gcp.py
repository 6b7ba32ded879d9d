"""GCP preflight checks, and the one table of what each Compute Engine machine series can do.

``SERIES`` is written down once and read twice: the checks below judge a spec against it, and the Pulumi
component (``gpufleet.infra.gcp``) takes its choices from it (boot disk type, image, compact placement
and its max distance). Per machine type figures (NICs, MTU, RoCE profile, zones) live in the catalog.

Checks (all offline, from the spec and the catalog):
- ``gcp_nic_layout``: host gVNICs plus GPU NICs per type, the VPC layout they need, nic types;
- ``gcp_zone_offered``: the zone (and region) offers the type, where the catalog knows its zones;
- ``gcp_capacity``: reservation, Spot and capacity-block rules;
- ``gcp_placement``: compact placement support, max distance, the VMs-per-policy limit;
- ``gcp_mtu``: the MTU of every VPC the cluster creates;
- ``gcp_filesystem_size``: Managed Lustre and Filestore capacity minimums, maximums and steps;
- ``gcp_vpc_count``: how many VPC networks the cluster creates (a per-project quota).

Sources (read 2026-11-22): Managed Lustre performance tiers
https://cloud.google.com/managed-lustre/docs/performance-tiers; Filestore service tiers
https://cloud.google.com/filestore/docs/service-tiers; placement policies
https://cloud.google.com/compute/docs/instances/placement-policies-overview; RDMA network profiles
https://cloud.google.com/vpc/docs/rdma-network-profiles; MTU https://cloud.google.com/vpc/docs/mtu.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpufleet.catalog import Catalog, InstanceType
from gpufleet.preflight.base import Finding, Level, check
from gpufleet.spec.model import (
    CapacityMode,
    ClusterSpec,
    FabricKind,
    FilestoreFilesystem,
    ManagedLustreFilesystem,
    NodeGroup,
    Role,
)

# --------------------------------------------------------------------------------------------------
# What each machine series can do


@dataclass(frozen=True)
class GcpSeries:
    """Rules of one Compute Engine machine series (matched by machine type prefix)."""

    prefix: str
    label: str
    boot_disk_type: str
    image_project: str
    image_family: str
    compact_placement: bool = False
    compact_max_vms: int | None = None
    max_distance: tuple[int, ...] = ()  # values a compact policy accepts; () = not supported
    spot: bool = True


_UBUNTU = ("ubuntu-os-cloud", "ubuntu-2204-lts")
# Google's accelerator images carry the RDMA (MRDMA) and gVNIC drivers A3 Ultra and A4 need.
# They carry the NVIDIA driver too, so the GPU roles verify rather than install on them (gpu_stack).
ACCELERATOR_IMAGE_PROJECT = "ubuntu-os-accelerator-images"
_UBUNTU_ACCEL = (ACCELERATOR_IMAGE_PROJECT, "ubuntu-accelerator-2204-amd64-with-nvidia-570")

SERIES: tuple[GcpSeries, ...] = (
    # A3 Ultra and A4 boot only from Hyperdisk.
    GcpSeries("a4-highgpu", "A4", "hyperdisk-balanced", *_UBUNTU_ACCEL, True, 1500, (2, 3)),
    GcpSeries("a3-ultragpu", "A3 Ultra", "hyperdisk-balanced", *_UBUNTU_ACCEL, True, 1500, (2, 3)),
    GcpSeries("a3-megagpu", "A3 Mega", "pd-balanced", *_UBUNTU, True, 1500, (2, 3)),
    GcpSeries("a3-highgpu", "A3 High", "pd-balanced", *_UBUNTU, True, 1500, (2, 3)),
    GcpSeries("a2-", "A2", "pd-balanced", *_UBUNTU, True, 1500, ()),
    GcpSeries("c3-", "C3", "pd-balanced", *_UBUNTU, True, 1500, ()),
    GcpSeries("n2-", "N2", "pd-balanced", *_UBUNTU, True, 1500, ()),
)
_DEFAULT_SERIES = GcpSeries("", "other", "pd-balanced", *_UBUNTU)


def series_of(instance_type: str) -> GcpSeries:
    """The rules for a machine type (the first prefix that matches; a conservative default otherwise)."""
    return next((s for s in SERIES if instance_type.startswith(s.prefix)), _DEFAULT_SERIES)


# Max NICs a VM can have: 10 on the machine types with many vCPUs (every GPU type here).
MAX_NICS_PER_VM = 10
# VPC MTU range (bytes) and the MTU the RoCE network profile uses.
VPC_MTU_RANGE = (1300, 8896)
ROCE_MTU = 8896
# Host VPC MTU: the largest a VPC allows, which Managed Lustre recommends (about 10 % faster).
HOST_MTU = 8896
# Google's documented Managed Lustre tiers (MB/s per TiB): min and max GiB, and the step that applies
# up to a threshold (None: everywhere above). Above the threshold, the capacity is a multiple of the
# larger step.
LUSTRE_TIERS: dict[int, tuple[int, int, tuple[tuple[int | None, int], ...]]] = {
    1000: (9_000, 10_008_000, ((1_530_000, 9_000), (None, 72_000))),
    500: (18_000, 20_016_000, ((3_060_000, 18_000), (None, 144_000))),
    250: (36_000, 40_032_000, ((6_120_000, 36_000), (None, 288_000))),
    125: (72_000, 12_240_000, ((None, 72_000),)),
}
# Filestore tiers: ranges of (min GiB, max GiB, step GiB). Basic tiers take any whole GiB; Regional's
# lower range documents no step here, so only its bounds are checked.
FILESTORE_TIERS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "BASIC_HDD": ((1_024, 65_434, 1),),
    "BASIC_SSD": ((2_560, 65_434, 1),),
    "ZONAL": ((1_024, 9_984, 256), (10_240, 102_400, 2_560)),
    "REGIONAL": ((1_024, 10_239, 1), (10_240, 102_400, 2_560)),
}
_RESERVATION = re.compile(
    r"^(projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
)


# --------------------------------------------------------------------------------------------------
# The network layout a spec gets (shared with the component, so checks and resources agree)


@dataclass(frozen=True)
class NicLayout:
    """The NICs one node of a group gets: host gVNICs, then GPU NICs."""

    host_nics: int
    gpu_nics: int
    gpu_nic_type: str | None
    gpu_mtu: int | None
    roce: bool

    @property
    def total(self) -> int:
        return self.host_nics + self.gpu_nics


def nic_layout(spec: ClusterSpec, group: NodeGroup, item: InstanceType | None) -> NicLayout:
    """Compute nodes get the catalog's layout (GPU NICs only when the spec asks for a fabric);
    every other node gets a single gVNIC on the host VPC."""
    if Role.COMPUTE not in group.roles or item is None:
        return NicLayout(1, 0, None, None, False)
    fabric = item.fabric
    gpu_nics = 0 if spec.fabric.kind is FabricKind.ETHERNET else fabric.interfaces
    return NicLayout(
        host_nics=fabric.host_nics or 1,
        gpu_nics=gpu_nics,
        gpu_nic_type=fabric.gpu_nic_type if gpu_nics else None,
        gpu_mtu=fabric.mtu if gpu_nics else None,
        roce=bool(gpu_nics) and fabric.network_profile == "roce",
    )


def vpc_count(spec: ClusterSpec, catalog: Catalog) -> int:
    """VPC networks the cluster creates: the host VPC, a second one for a second host NIC, one per
    TCPX/TCPXO GPU NIC, or one RoCE VPC."""
    layouts = [nic_layout(spec, g, catalog.get(g.instance_type)) for g in spec.node_groups]
    host = max(layout.host_nics for layout in layouts)
    gpu = max((1 if layout.roce else layout.gpu_nics) for layout in layouts)
    return host + gpu


# --------------------------------------------------------------------------------------------------
# Checks


def _path(spec: ClusterSpec, group: NodeGroup, field: str = "") -> str:
    index = spec.node_groups.index(group)
    return f"node_groups[{index}]" + (f".{field}" if field else "")


@check("gcp_nic_layout", providers=("gcp",))
def gcp_nic_layout(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.provider != "gcp":
            continue
        path = _path(spec, group, "instance_type")
        fabric = item.fabric
        if Role.COMPUTE not in group.roles:
            if fabric.interfaces:
                yield Finding(
                    Level.WARNING,
                    "gcp_nic_layout",
                    path,
                    f"{group.instance_type} has {fabric.interfaces} GPU NICs, but group '{group.name}' is "
                    "not compute: it gets a single gVNIC. Use a small type such as n2-standard-8 for head "
                    "nodes",
                )
            continue
        if fabric.interfaces and fabric.host_nics is None:
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.host_nics, so its NIC layout is "
                "unknown; add it to the catalog (1 for A3 High/Mega, 2 for A3 Ultra and A4)",
            )
            continue
        layout = nic_layout(spec, group, item)
        if layout.total > MAX_NICS_PER_VM:
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                path,
                f"{group.instance_type} would get {layout.total} NICs; a VM takes at most {MAX_NICS_PER_VM}",
            )
        if fabric.interfaces and fabric.gpu_nic_type is None:
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.gpu_nic_type (GVNIC or MRDMA)",
            )
        if fabric.gpu_nic_type == "MRDMA" and fabric.network_profile != "roce":
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                path,
                f"{group.instance_type}'s MRDMA NICs attach only to a VPC created with the RoCE network "
                "profile; set fabric.network_profile: roce in the catalog",
            )
        if fabric.kind in (FabricKind.TCPX, FabricKind.TCPXO) and fabric.gpu_nic_type not in (None, "GVNIC"):
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                path,
                f"GPUDirect-{fabric.kind.value.upper()} runs over gVNIC GPU NICs (one VPC each); the "
                f"catalog says {fabric.gpu_nic_type}",
            )
        wanted = spec.fabric.interfaces
        if wanted is not None and spec.fabric.kind is not FabricKind.ETHERNET and wanted != fabric.interfaces:
            yield Finding(
                Level.ERROR,
                "gcp_nic_layout",
                "fabric.interfaces",
                f"on GCP the GPU NIC layout is fixed per machine type: {group.instance_type} takes "
                f"{fabric.interfaces} GPU NICs ({wanted} asked); drop fabric.interfaces",
            )


@check("gcp_zone_offered", providers=("gcp",))
def gcp_zone_offered(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = spec.provider
    zone, region = provider.zone, provider.region  # type: ignore[union-attr]
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None:
            continue
        path = _path(spec, group, "instance_type")
        if item.zones and zone not in item.zones:
            yield Finding(
                Level.ERROR,
                "gcp_zone_offered",
                "provider.zone",
                f"{group.instance_type} is not offered in {zone}; the catalog lists: "
                f"{', '.join(sorted(item.zones))}",
            )
        elif not item.zones and item.regions and region not in item.regions:
            yield Finding(
                Level.ERROR,
                "gcp_zone_offered",
                "provider.region",
                f"{group.instance_type} is not offered in {region}; the catalog lists: "
                f"{', '.join(sorted(item.regions))}",
            )
        elif not item.zones and item.gpu is not None:
            yield Finding(
                Level.INFO,
                "gcp_zone_offered",
                path,
                f"the catalog does not know where {group.instance_type} is offered; check that {zone} "
                "has it: gcloud compute machine-types list --filter='name=" + group.instance_type + "'",
            )


@check("gcp_capacity", providers=("gcp",))
def gcp_capacity(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.node_groups:
        capacity = group.capacity
        path = _path(spec, group, "capacity")
        series = series_of(group.instance_type)
        if capacity.mode is CapacityMode.CAPACITY_BLOCK:
            yield Finding(
                Level.ERROR,
                "gcp_capacity",
                f"{path}.mode",
                "capacity_block is AWS's; on GCP a calendar-mode future reservation delivers a reservation: "
                "use mode: reservation with its name",
            )
        if capacity.reservation_group_arn is not None:
            yield Finding(
                Level.ERROR,
                "gcp_capacity",
                f"{path}.reservation_group_arn",
                "reservation_group_arn is AWS only; on GCP name one reservation in 'reservation'",
            )
        if capacity.mode is CapacityMode.RESERVATION and capacity.reservation is not None:
            if not _RESERVATION.match(capacity.reservation):
                yield Finding(
                    Level.ERROR,
                    "gcp_capacity",
                    f"{path}.reservation",
                    f"'{capacity.reservation}' is not a reservation name; give NAME, or "
                    "projects/OWNER_PROJECT/reservations/NAME for a shared reservation",
                )
            if Role.COMPUTE in group.roles:
                yield Finding(
                    Level.INFO,
                    "gcp_capacity",
                    f"{path}.reservation",
                    f"group '{group.name}' consumes reservation '{capacity.reservation}': its VMs carry no "
                    "gpufleet placement policy (a VM that consumes a specific reservation must use the "
                    "reservation's own compact placement policy, if it has one); create the reservation "
                    "with a compact placement policy for dense placement",
                )
        if capacity.mode is CapacityMode.SPOT:
            if not series.spot:
                yield Finding(
                    Level.ERROR,
                    "gcp_capacity",
                    f"{path}.mode",
                    f"{series.label} machine types are not offered as Spot VMs; use on_demand or reservation",
                )
            if Role.CONTROLLER in group.roles:
                yield Finding(
                    Level.WARNING,
                    "gcp_capacity",
                    f"{path}.mode",
                    "the controller runs on a Spot VM: a preemption stops slurmctld for the whole "
                    "cluster; use on_demand for the controller group",
                )


@check("gcp_placement", providers=("gcp",))
def gcp_placement(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.compute_groups:
        if group.capacity.mode is CapacityMode.RESERVATION:
            continue  # the reservation decides placement (see gcp_capacity)
        series = series_of(group.instance_type)
        path = _path(spec, group, "count")
        if not series.compact_placement:
            yield Finding(
                Level.WARNING,
                "gcp_placement",
                _path(spec, group, "instance_type"),
                f"{group.instance_type} does not support compact placement policies: its VMs are placed "
                "anywhere in the zone",
            )
            continue
        if series.compact_max_vms is not None and group.count > series.compact_max_vms:
            yield Finding(
                Level.ERROR,
                "gcp_placement",
                path,
                f"a compact placement policy holds at most {series.compact_max_vms} {series.label} VMs; "
                f"group '{group.name}' has {group.count}. Split it into groups of at most "
                f"{series.compact_max_vms}",
            )
        if series.max_distance:
            yield Finding(
                Level.INFO,
                "gcp_placement",
                _path(spec, group, "instance_type"),
                f"the compact placement policy of group '{group.name}' sets max distance "
                f"{max(series.max_distance)} (a Preview field; some projects need access granted for "
                f"{series.label}); VMs that cannot be placed that close fail to create rather than spread",
            )


@check("gcp_mtu", providers=("gcp",))
def gcp_mtu(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    low, high = VPC_MTU_RANGE
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is None:
            continue
        layout = nic_layout(spec, group, item)
        if not layout.gpu_nics:
            continue
        path = _path(spec, group, "instance_type")
        mtu = layout.gpu_mtu
        if mtu is None:
            yield Finding(
                Level.ERROR,
                "gcp_mtu",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.mtu for its GPU NIC VPCs",
            )
        elif not low <= mtu <= high:
            yield Finding(
                Level.ERROR,
                "gcp_mtu",
                path,
                f"the catalog's GPU VPC MTU for {group.instance_type} is {mtu}; a VPC's MTU is {low}-{high}",
            )
        elif layout.roce and mtu != ROCE_MTU:
            yield Finding(
                Level.ERROR,
                "gcp_mtu",
                path,
                f"a RoCE VPC runs with MTU {ROCE_MTU}; the catalog says {mtu} for {group.instance_type}",
            )


@check("gcp_filesystem_size", providers=("gcp",))
def gcp_filesystem_size(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    fs = spec.filesystem
    if isinstance(fs, ManagedLustreFilesystem):
        problem = lustre_size_problem(fs.size_gib, fs.throughput_per_tib)
    elif isinstance(fs, FilestoreFilesystem):
        problem = filestore_size_problem(fs.size_gib, fs.tier)
    else:
        return
    if problem:
        yield Finding(Level.ERROR, "gcp_filesystem_size", "filesystem.size_gib", problem)


def lustre_size_problem(size_gib: int, throughput: int) -> str | None:
    low, high, steps = LUSTRE_TIERS[throughput]
    tier = f"the {throughput} MB/s per TiB Managed Lustre tier"
    if not low <= size_gib <= high:
        return f"{tier} takes {low}-{high} GiB; got {size_gib}"
    step = next(s for limit, s in steps if limit is None or size_gib <= limit)
    if size_gib % step:
        below = size_gib - size_gib % step
        above = below + step
        nearest = f"{above}" if below < low else f"{below} or {above}"
        return f"{tier} grows in steps of {step} GiB at this size; got {size_gib}, use {nearest}"
    return None


def filestore_size_problem(size_gib: int, tier: str) -> str | None:
    ranges = FILESTORE_TIERS[tier]
    for low, high, step in ranges:
        if low <= size_gib <= high:
            if size_gib % step:
                below = size_gib - size_gib % step
                options = f"{below} or {below + step}" if below >= low else f"{below + step}"
                return (
                    f"Filestore {tier} takes steps of {step} GiB from {low} GiB; got {size_gib}, "
                    f"use {options}"
                )
            return None
    spans = ", ".join(f"{low}-{high}" for low, high, _ in ranges)
    return f"Filestore {tier} takes {spans} GiB; got {size_gib}"


@check("gcp_vpc_count", providers=("gcp",))
def gcp_vpc_count(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    count = vpc_count(spec, catalog)
    if count > 1:
        yield Finding(
            Level.INFO,
            "gcp_vpc_count",
            "node_groups",
            f"the cluster creates {count} VPC networks; check the project's 'Networks' quota "
            "(gcloud compute project-info describe) leaves room for them",
        )
