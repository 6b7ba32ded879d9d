"""GCP preflight checks: a spec judged against the GCP facts of ``gpufleet.catalog.gcp`` (machine series,
NIC layout, filesystem sizes) and the catalog.

Checks (all offline, from the spec and the catalog):
- ``gcp_nic_layout``: host gVNICs plus GPU NICs per type, the VPC layout they need, nic types;
- ``gcp_zone_offered``: the zone (and region) offers the type, where the catalog knows its zones;
- ``gcp_service_zones``: the zone offers Managed Lustre and the RoCE network profile the spec needs, where
  ``gcp_zones.yaml`` has the zone's region;
- ``gcp_capacity``: reservation, Spot and capacity-block rules;
- ``gcp_placement``: compact placement support, max distance, the VMs-per-policy limit;
- ``gcp_mtu``: the MTU of every VPC the cluster creates;
- ``gcp_filesystem_size``: Managed Lustre and Filestore capacity minimums, maximums and steps;
- ``gcp_vpc_count``: how many VPC networks the cluster creates (a per-project quota);
- ``gcp_tcpx_kernel``: GPUDirect-TCPX (A3 High) nodes boot an image with the linux-gcp-tcpx kernel.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpufleet.catalog import Catalog
from gpufleet.catalog.gcp import (
    FLEX_START_DOC,
    FLEX_START_MAX_RUN,
    FLEX_START_MIN_RUN,
    FLEX_START_QUEUE,
    FLEX_START_TIMEOUT,
    MAX_NICS_PER_VM,
    ON_DEMAND_DOC,
    RESERVATION_NAME,
    ROCE_MTU,
    TCPX_IMAGE_SOURCE,
    TCPX_KERNEL_DOC,
    TCPX_KERNEL_PACKAGE,
    VPC_MTU_RANGE,
    GcpSeries,
    compact_max_distance,
    filestore_size_problem,
    group_os_release,
    lustre_size_problem,
    nic_layout,
    series_of,
    vpc_count,
)
from gpufleet.catalog.gcp_zones import ZoneTable, judge_zone, load_gcp_zones
from gpufleet.preflight.base import Finding, check
from gpufleet.preflight.common import os_release_findings
from gpufleet.severity import Severity
from gpufleet.spec.model import (
    CapacityMode,
    ClusterSpec,
    FabricKind,
    FilestoreFilesystem,
    GcpProvider,
    ManagedLustreFilesystem,
    NodeGroup,
    Role,
)

# A Compute Engine resource name (RFC 1035), as a resource policy's name must be.
POLICY_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# Compute Engine machine type names (read 2026-11-24): predefined types are SERIES-TYPE-VCPUS, with a GPU
# count and "g" for accelerator types (n2-standard-8, c3d-highmem-360, a3-megagpu-8g) and optional
# suffixes (-lssd, -metal, -highlssd): https://cloud.google.com/compute/docs/machine-resource; shared-core
# e2-micro / e2-small / e2-medium, f1-micro, g1-small; X4's SERIES-VCPUS (x4-960); custom types
# custom-CPUS-MB (N1), SERIES-custom-CPUS-MB with -ext for extended memory, and E2 shared-core
# e2-custom-(micro|small|medium)-MB: https://cloud.google.com/compute/docs/instances/creating-instance-with-custom-machine-type
MACHINE_TYPE_DOC = "https://cloud.google.com/compute/docs/machine-resource"
MACHINE_TYPE_NAME = re.compile(
    r"^(?:"
    r"[a-z][a-z0-9]{1,5}-[a-z]+-\d+[gt]?(?:-[a-z]+)*"  # predefined, e.g. c3-standard-4-lssd
    r"|e2-(?:micro|small|medium)|f1-micro|g1-small"  # shared-core
    r"|[a-z][a-z0-9]{1,5}-\d+"  # X4: x4-960
    r"|(?:[a-z][a-z0-9]{1,5}-)?custom-\d+-\d+(?:-ext)?"  # custom-4-5120, n2-custom-8-16384-ext
    r"|e2-custom-(?:micro|small|medium)-\d+"  # E2 shared-core custom
    r")$"
)

# --------------------------------------------------------------------------------------------------
# Checks


def _provider(spec: ClusterSpec) -> GcpProvider:
    """The spec's GCP provider (every check here is registered for GCP alone)."""
    assert isinstance(spec.provider, GcpProvider)
    return spec.provider


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
                    Severity.WARNING,
                    "gcp_nic_layout",
                    path,
                    f"{group.instance_type} has {fabric.interfaces} GPU NICs, but group '{group.name}' is "
                    "not compute: it gets a single gVNIC. Use a small type such as n2-standard-8 for head "
                    "nodes",
                )
            continue
        if fabric.interfaces and fabric.host_nics is None:
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.host_nics, so its NIC layout is "
                "unknown; add it to the catalog (1 for A3 High/Mega, 2 for A3 Ultra and A4)",
            )
            continue
        layout = nic_layout(spec, group, item)
        if layout.total > MAX_NICS_PER_VM:
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                path,
                f"{group.instance_type} would get {layout.total} NICs; a VM takes at most {MAX_NICS_PER_VM}",
            )
        if fabric.interfaces and fabric.gpu_nic_type is None:
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.gpu_nic_type (GVNIC or MRDMA)",
            )
        if fabric.gpu_nic_type == "MRDMA" and fabric.network_profile != "roce":
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                path,
                f"{group.instance_type}'s MRDMA NICs attach only to a VPC created with the RoCE network "
                "profile; set fabric.network_profile: roce in the catalog",
            )
        if fabric.kind in (FabricKind.TCPX, FabricKind.TCPXO) and fabric.gpu_nic_type not in (None, "GVNIC"):
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                path,
                f"GPUDirect-{fabric.kind.value.upper()} runs over gVNIC GPU NICs (one VPC each); the "
                f"catalog says {fabric.gpu_nic_type}",
            )
        wanted = spec.fabric.interfaces
        if wanted is not None and spec.fabric.kind is not FabricKind.ETHERNET and wanted != fabric.interfaces:
            yield Finding(
                Severity.ERROR,
                "gcp_nic_layout",
                "fabric.interfaces",
                f"on GCP the GPU NIC layout is fixed per machine type: {group.instance_type} takes "
                f"{fabric.interfaces} GPU NICs ({wanted} asked); drop fabric.interfaces",
            )


@check("gcp_zone_offered", providers=("gcp",))
def gcp_zone_offered(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = _provider(spec)
    zone, region = provider.zone, provider.region
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None:
            continue
        path = _path(spec, group, "instance_type")
        if item.zones and zone not in item.zones:
            yield Finding(
                Severity.ERROR,
                "gcp_zone_offered",
                "provider.zone",
                f"{group.instance_type} is not offered in {zone}; the catalog lists: "
                f"{', '.join(sorted(item.zones))}",
            )
        elif not item.zones and item.regions and region not in item.regions:
            yield Finding(
                Severity.ERROR,
                "gcp_zone_offered",
                "provider.region",
                f"{group.instance_type} is not offered in {region}; the catalog lists: "
                f"{', '.join(sorted(item.regions))}",
            )
        elif not item.zones and item.gpu is not None:
            yield Finding(
                Severity.INFO,
                "gcp_zone_offered",
                path,
                f"the catalog does not know where {group.instance_type} is offered; check that {zone} "
                "has it: gcloud compute machine-types list --filter='name=" + group.instance_type + "'",
            )


def _service_zone(table: ZoneTable, service: str, zone: str, path: str) -> Iterator[Finding]:
    verdict = judge_zone(table, zone)
    source = f"{table.source.url}, read {table.source.retrieved}"
    if verdict.offered is False:
        region = zone.rsplit("-", 1)[0]
        where = f"in {region} it runs in" if region in table.regions else "it runs in"
        yield Finding(
            Severity.ERROR,
            "gcp_service_zones",
            path,
            f"{service} is not offered in {zone}; {where} {', '.join(verdict.alternatives)} ({source}). "
            "Set provider.zone to one of them",
        )
    elif verdict.offered is None:
        yield Finding(
            Severity.INFO,
            "gcp_service_zones",
            path,
            f"gpufleet's zone data does not cover {zone} for {service} (only part of {source} could be "
            "read): check the page before 'gpufleet up'",
        )


@check("gcp_service_zones", providers=("gcp",))
def gcp_service_zones(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """Managed Lustre and the RoCE VPC's network profile are zonal: the cluster's zone must offer them."""
    zone = _provider(spec).zone
    zones = load_gcp_zones()
    if isinstance(spec.filesystem, ManagedLustreFilesystem):
        yield from _service_zone(zones.managed_lustre, "Managed Lustre", zone, "provider.zone")
    roce = [g for g in spec.node_groups if nic_layout(spec, g, catalog.get(g.instance_type)).roce]
    if roce:
        profile = f"the RoCE network profile {zone}-vpc-roce"
        yield from _service_zone(zones.roce_network_profile, profile, zone, "provider.zone")


@check("gcp_machine_type_name", providers=("gcp",))
def gcp_machine_type_name(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """A name outside Compute Engine's machine type grammar is an error (an unknown but well-formed one
    is a warning, ``instance_type_known``)."""
    for group in spec.node_groups:
        if catalog.get(group.instance_type) is not None or MACHINE_TYPE_NAME.match(group.instance_type):
            continue
        yield Finding(
            Severity.ERROR,
            "gcp_machine_type_name",
            _path(spec, group, "instance_type"),
            f"'{group.instance_type}' is not a Compute Engine machine type name: names are "
            "SERIES-TYPE-VCPUS (n2-standard-8, a3-megagpu-8g), a shared-core type (e2-small), or custom "
            f"(custom-4-5120, n2-custom-8-16384) ({MACHINE_TYPE_DOC})",
        )


@check("gcp_capacity", providers=("gcp",))
def gcp_capacity(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.node_groups:
        capacity = group.capacity
        path = _path(spec, group, "capacity")
        series = series_of(group.instance_type)
        if capacity.mode is CapacityMode.CAPACITY_BLOCK:
            yield Finding(
                Severity.ERROR,
                "gcp_capacity",
                f"{path}.mode",
                "capacity_block is AWS's; on GCP a calendar-mode future reservation delivers a reservation: "
                "use mode: reservation with its name",
            )
        if capacity.placement_group is not None and not POLICY_NAME.match(capacity.placement_group):
            yield Finding(
                Severity.ERROR,
                "gcp_capacity",
                f"{path}.placement_group",
                f"'{capacity.placement_group}' is not a resource policy name: on GCP placement_group names "
                "the reservation's own compact placement policy (lowercase letters, digits and hyphens, "
                "starting with a letter, at most 63 characters)",
            )
        if capacity.reservation_group_arn is not None:
            yield Finding(
                Severity.ERROR,
                "gcp_capacity",
                f"{path}.reservation_group_arn",
                "reservation_group_arn is AWS only; on GCP name one reservation in 'reservation'",
            )
        if capacity.mode is CapacityMode.RESERVATION and capacity.reservation is not None:
            if not RESERVATION_NAME.match(capacity.reservation):
                yield Finding(
                    Severity.ERROR,
                    "gcp_capacity",
                    f"{path}.reservation",
                    f"'{capacity.reservation}' is not a reservation name; give NAME, or "
                    "projects/OWNER_PROJECT/reservations/NAME for a shared reservation",
                )
            if Role.COMPUTE in group.roles and capacity.placement_group is None:
                yield Finding(
                    Severity.INFO,
                    "gcp_capacity",
                    f"{path}.reservation",
                    f"group '{group.name}' consumes reservation '{capacity.reservation}': its VMs carry no "
                    "gpufleet placement policy (a VM that consumes a specific reservation must use the "
                    "reservation's own compact placement policy, if it has one); if the reservation has "
                    "one, name it in capacity.placement_group so that its VMs carry it",
                )
        if capacity.mode is CapacityMode.ON_DEMAND and not series.on_demand:
            yield Finding(
                Severity.ERROR,
                "gcp_capacity",
                f"{path}.mode",
                f"{series.label} ({group.instance_type}) has no on-demand capacity: use mode: reservation "
                "with a reservation's name, mode: spot, or mode: flex_start with max_run_duration (Dynamic "
                f"Workload Scheduler) ({ON_DEMAND_DOC})",
            )
        if capacity.mode is CapacityMode.FLEX_START:
            yield from _flex_start(spec, group, series)
        if capacity.mode is CapacityMode.SPOT:
            if not series.spot:
                yield Finding(
                    Severity.ERROR,
                    "gcp_capacity",
                    f"{path}.mode",
                    f"{series.label} machine types are not offered as Spot VMs; use on_demand or reservation",
                )
            if Role.CONTROLLER in group.roles:
                yield Finding(
                    Severity.WARNING,
                    "gcp_capacity",
                    f"{path}.mode",
                    "the controller runs on a Spot VM: a preemption stops slurmctld for the whole "
                    "cluster; use on_demand for the controller group",
                )


def _flex_start(spec: ClusterSpec, group: NodeGroup, series: GcpSeries) -> Iterator[Finding]:
    path = _path(spec, group, "capacity")
    if not series.flex_start:
        yield Finding(
            Severity.ERROR,
            "gcp_capacity",
            f"{path}.mode",
            f"{series.label} machine types are not offered as flex-start VMs ({FLEX_START_DOC})",
        )
    duration = group.capacity.max_run_duration
    if duration is not None and not FLEX_START_MIN_RUN <= duration <= FLEX_START_MAX_RUN:
        yield Finding(
            Severity.ERROR,
            "gcp_capacity",
            f"{path}.max_run_duration",
            f"Compute Engine takes a max run duration of at least {FLEX_START_MIN_RUN.seconds} seconds, and "
            f"a flex-start VM runs for at most {FLEX_START_MAX_RUN.days} days ({FLEX_START_DOC}); got "
            f"{duration}. Set max_run_duration between {FLEX_START_MIN_RUN.seconds}s and "
            f"{FLEX_START_MAX_RUN.days}d",
        )
    elif duration is not None and duration < spec.lifetime.ttl:
        yield Finding(
            Severity.WARNING,
            "gcp_capacity",
            f"{path}.max_run_duration",
            f"group '{group.name}' is deleted by Compute Engine after its max_run_duration {duration}, "
            f"before the cluster's lifetime.ttl {spec.lifetime.ttl} ends; the next 'gpufleet up' asks for "
            "new flex-start VMs in their place. Set lifetime.ttl to at most the max_run_duration, or raise "
            "the duration",
        )
    minutes = int(FLEX_START_TIMEOUT.total_seconds() // 60)
    yield Finding(
        Severity.INFO,
        "gcp_capacity",
        f"{path}.mode",
        f"group '{group.name}' waits for flex-start capacity: Google keeps the request queued for up to "
        f"{int(FLEX_START_QUEUE.total_seconds() // 3600)} h, so 'up' (or 'pulumi up') may take up to "
        f"{minutes} min before it fails or the VMs run; give a CI job more than that (docs/gcp.md, "
        '"Flex-start")',
    )
    if Role.CONTROLLER in group.roles:
        yield Finding(
            Severity.ERROR,
            "gcp_capacity",
            f"{path}.mode",
            "the controller would be a flex-start VM, deleted at the end of its max_run_duration with "
            "slurmctld's state; use on_demand for the controller group",
        )


@check("gcp_placement", providers=("gcp",))
def gcp_placement(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.compute_groups:
        if group.capacity.mode is CapacityMode.RESERVATION:
            continue  # the reservation decides placement (see gcp_capacity)
        if group.capacity.mode is CapacityMode.FLEX_START:
            # Flex-start VMs take no placement policy (compute.placement_policy; slurm-gcp's dws_flex "CAN
            # NOT be used with placement groups", cluster-toolkit schedmd-slurm-gcp-v6-nodeset/variables.tf).
            yield Finding(
                Severity.INFO,
                "gcp_placement",
                _path(spec, group, "capacity.mode"),
                f"group '{group.name}' gets no compact placement policy: flex-start VMs take none, so its "
                "VMs may be placed anywhere in the zone (farther apart than a compact policy's)",
            )
            continue
        series = series_of(group.instance_type)
        path = _path(spec, group, "count")
        if not series.compact_placement:
            yield Finding(
                Severity.WARNING,
                "gcp_placement",
                _path(spec, group, "instance_type"),
                f"{group.instance_type} does not support compact placement policies: its VMs are placed "
                "anywhere in the zone",
            )
            continue
        if series.compact_max_vms is not None and group.count > series.compact_max_vms:
            yield Finding(
                Severity.ERROR,
                "gcp_placement",
                path,
                f"a compact placement policy holds at most {series.compact_max_vms} {series.label} VMs; "
                f"group '{group.name}' has {group.count}. Split it into groups of at most "
                f"{series.compact_max_vms}",
            )
        if series.max_distance:
            yield Finding(
                Severity.INFO,
                "gcp_placement",
                _path(spec, group, "instance_type"),
                f"the compact placement policy of group '{group.name}' sets max distance "
                f"{compact_max_distance(group.instance_type, group.count)}, the closest that holds "
                f"{group.count} VM(s) as slurm-gcp sizes placement groups (a Preview field; some projects "
                "need access granted for "
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
                Severity.ERROR,
                "gcp_mtu",
                path,
                f"the catalog entry of {group.instance_type} lacks fabric.mtu for its GPU NIC VPCs",
            )
        elif not low <= mtu <= high:
            yield Finding(
                Severity.ERROR,
                "gcp_mtu",
                path,
                f"the catalog's GPU VPC MTU for {group.instance_type} is {mtu}; a VPC's MTU is {low}-{high}",
            )
        elif layout.roce and mtu != ROCE_MTU:
            yield Finding(
                Severity.ERROR,
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
        yield Finding(Severity.ERROR, "gcp_filesystem_size", "filesystem.size_gib", problem)


@check("gcp_vpc_count", providers=("gcp",))
def gcp_vpc_count(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    count = vpc_count(spec, catalog)
    if count > 1:
        yield Finding(
            Severity.INFO,
            "gcp_vpc_count",
            "node_groups",
            f"the cluster creates {count} VPC networks; check the project's 'Networks' quota "
            "(gcloud compute project-info describe) leaves room for them",
        )


@check("gcp_tcpx_kernel", providers=("gcp",))
def gcp_tcpx_kernel(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """GPUDirect-TCPX is built for Google's patched kernel, which no public image carries."""
    if spec.fabric.kind is not FabricKind.TCPX:
        return
    tcpx = [
        g.instance_type
        for g in spec.compute_groups
        if (item := catalog.get(g.instance_type)) is not None and item.fabric.kind is FabricKind.TCPX
    ]
    if not tcpx:
        return
    image = _provider(spec).image
    types = ", ".join(sorted(set(tcpx)))
    if image is None:
        yield Finding(
            Severity.WARNING,
            "gcp_tcpx_kernel",
            "provider.image",
            f"{types} nodes boot {series_of(tcpx[0]).image_family}, whose stock kernel lacks the patches of "
            f"{TCPX_KERNEL_PACKAGE} that GPUDirect-TCPX is tuned for ({TCPX_KERNEL_DOC}); build an image "
            f"with it as Cluster Toolkit does ({TCPX_IMAGE_SOURCE}, with the PPA login Google hands out) and "
            "set provider.image to it",
        )
    else:
        yield Finding(
            Severity.INFO,
            "gcp_tcpx_kernel",
            "provider.image",
            f"{image} must boot the {TCPX_KERNEL_PACKAGE} kernel for GPUDirect-TCPX; the gcp_gpudirect role "
            "reads uname -r on each node (gcp_gpudirect_tcpx_kernel_required: true makes it fail otherwise)",
        )


@check("gcp_os_release", providers=("gcp",))
def gcp_os_release(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """Groups on two OS releases get two builds of the one Slurm (catalog.os_releases): the head node follows
    the GPU nodes (catalog.gcp.image_family), but two series with images of their own can disagree."""
    image = _provider(spec).image
    releases = {g.name: group_os_release(spec, g.instance_type, image) for g in spec.node_groups}
    known = {name: release for name, release in releases.items() if release is not None}
    yield from os_release_findings(
        "gcp_os_release",
        spec,
        known,
        "set provider.image to one image for every group (a baked image, gpufleet image build), or keep "
        "machine series that need different releases (A3 High boots Ubuntu 22.04 for its TCPX kernel; A3 "
        "Mega, A3 Ultra and A4 boot Google's 24.04 accelerator image) in separate clusters",
    )
