"""GCP facts the Pulumi program and the preflight checks share: what each machine series can do, the NIC
layout a node gets, and the filesystem size rules, each with the page it comes from.

``SERIES`` is written down once and read twice: ``gpufleet.preflight.gcp`` judges a spec against it, and
the Pulumi component (``gpufleet.infra.gcp``) takes its choices from it (boot disk type, image, compact
placement and its max distance). Per machine type figures (NICs, MTU, RoCE profile, zones) live in the
catalog. Pure data and functions: no cloud SDK is imported here. Creates nothing.

Sources (read 2026-11-22): Managed Lustre performance tiers
https://cloud.google.com/managed-lustre/docs/performance-tiers; Filestore service tiers
https://cloud.google.com/filestore/docs/service-tiers; placement policies
https://cloud.google.com/compute/docs/instances/placement-policies-overview; RDMA network profiles
https://cloud.google.com/vpc/docs/rdma-network-profiles; MTU https://cloud.google.com/vpc/docs/mtu.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from gpufleet.catalog.model import Catalog, InstanceType
from gpufleet.spec.model import ClusterSpec, FabricKind, NodeGroup, Role

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
    on_demand: bool = True  # False: capacity only through a reservation, Spot or DWS flex-start
    flex_start: bool = False  # DWS flex-start VMs offered
    # True: the series boots its own family (the accelerator image's driver, A3 High's 22.04 for the TCPX
    # kernel); False: plain Ubuntu of the cluster's OS release (``image_family``), so that the head node
    # and CPU groups run the Slurm release of the GPU nodes (catalog.os_releases).
    own_image: bool = False


_UBUNTU = ("ubuntu-os-cloud", "ubuntu-2204-lts")
# Google's accelerator images carry the NVIDIA driver and the RDMA (MRDMA) and gVNIC drivers A3 Ultra and
# A4 need. The family is the one Cluster Toolkit's A3 Mega, A3 Ultra and A4 Slurm blueprints build on
# (ACCELERATOR_IMAGE_SOURCE: base image ubuntu-accelerator-2404-amd64-with-nvidia-580-v20260522), the
# driver branch gpufleet's software.nvidia_driver defaults to. A3 High stays on ubuntu-2204-lts, which
# the toolkit's A3 High blueprint builds on too (it adds the TCPX kernel, linux-image-gcp-tcpx).
ACCELERATOR_IMAGE_SOURCE = (
    "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375afbb44da4b596be314634e7486af4a/"
    "examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml"
)
# GPUDirect-TCPX (A3 High) and its kernel: Cluster Toolkit's a3-highgpu-8g Slurm blueprint builds its image
# from ubuntu-2204-lts, installs the linux-gcp-tcpx kernel from Canonical's private PPA
# canonical-kernel-gcp-tcpx (with a login Google hands out), boots it by default and holds
# linux-image-gcp-tcpx and linux-headers-gcp-tcpx (TCPX_IMAGE_SOURCE). Its README: "access credentials to
# install the linux-gcp-tcpx kernel for a3-highgpu-8g. This kernel contains patches that significantly
# enhance the network performance of workloads that span multiple a3-highgpu-8g VMs" (TCPX_KERNEL_DOC).
# ubuntu-2204-lts itself boots the stock gcp kernel.
_TOOLKIT_A3HIGH = (
    "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375afbb44da4b596be314634e7486af4a/"
    "examples/machine-learning/a3-highgpu-8g/"
)
TCPX_KERNEL_DOC = _TOOLKIT_A3HIGH + "README.md"
TCPX_IMAGE_SOURCE = _TOOLKIT_A3HIGH + "a3high-slurm-blueprint.yaml"
TCPX_KERNEL_PACKAGE = "linux-gcp-tcpx"
# They carry the NVIDIA driver (and fabric manager) only: the GPU roles verify those and install CUDA, NCCL
# and DCGM, as the image manifest says (catalog/images.yaml, gcp-ubuntu-accelerator-2404-nvidia-580).
ACCELERATOR_IMAGE_PROJECT = "ubuntu-os-accelerator-images"
_UBUNTU_ACCEL = (ACCELERATOR_IMAGE_PROJECT, "ubuntu-accelerator-2404-amd64-with-nvidia-580")

# Google's Ubuntu LTS image families (https://cloud.google.com/compute/docs/images/os-details, Ubuntu,
# read 2026-11-24): 22.04 is ubuntu-2204-lts; from 24.04 the family names the architecture,
# ubuntu-2404-lts-amd64 (and ubuntu-2404-lts-arm64). Every type here is x86-64.
_UBUNTU_2404 = ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64")
# The plain Ubuntu a node without an image of its own boots, by the cluster's OS release.
PLAIN_UBUNTU: dict[str, tuple[str, str]] = {"ubuntu-22.04": _UBUNTU, "ubuntu-24.04": _UBUNTU_2404}
# The OS release (catalog.os_releases) of every family gpufleet boots by default; the accelerator family
# names its release (ubuntu-accelerator-2404-...).
IMAGE_OS_RELEASE: dict[str, str] = {
    _UBUNTU[1]: "ubuntu-22.04",
    _UBUNTU_2404[1]: "ubuntu-24.04",
    _UBUNTU_ACCEL[1]: "ubuntu-24.04",
}
DEFAULT_OS_RELEASE = "ubuntu-22.04"

SERIES: tuple[GcpSeries, ...] = (
    # A3 Ultra and A4 boot only from Hyperdisk.
    # A3 Ultra and A4 have no on-demand capacity (ON_DEMAND_DOC): reservation, Spot or flex-start.
    GcpSeries(
        "a4-highgpu",
        "A4",
        "hyperdisk-balanced",
        *_UBUNTU_ACCEL,
        True,
        1500,
        (2, 3),
        on_demand=False,
        flex_start=True,
        own_image=True,
    ),
    GcpSeries(
        "a3-ultragpu",
        "A3 Ultra",
        "hyperdisk-balanced",
        *_UBUNTU_ACCEL,
        True,
        1500,
        (2, 3),
        on_demand=False,
        flex_start=True,
        own_image=True,
    ),
    GcpSeries(
        "a3-megagpu",
        "A3 Mega",
        "pd-balanced",
        *_UBUNTU_ACCEL,
        True,
        1500,
        (2, 3),
        flex_start=True,
        own_image=True,
    ),
    GcpSeries(
        "a3-highgpu", "A3 High", "pd-balanced", *_UBUNTU, True, 1500, (2, 3), flex_start=True, own_image=True
    ),
    GcpSeries("a2-", "A2", "pd-balanced", *_UBUNTU, True, 1500, (), flex_start=True),
    GcpSeries("c3-", "C3", "pd-balanced", *_UBUNTU, True, 1500, ()),
    GcpSeries("n2-", "N2", "pd-balanced", *_UBUNTU, True, 1500, ()),
)
_DEFAULT_SERIES = GcpSeries("", "other", "pd-balanced", *_UBUNTU)
# Consumption options per GPU machine type: A3 Ultra and A4 list reservations, Spot and flex-start only.
ON_DEMAND_DOC = "https://cloud.google.com/compute/docs/accelerator-optimized-machines#consumption-options"
# DWS flex-start VMs: provisioning model FLEX_START, a max run duration of at most 7 days, deleted at its end
# ("Flex-start VMs can run for up to seven days", https://cloud.google.com/compute/docs/instances/
# about-flex-start-vms, read 2026-11-24).
FLEX_START_DOC = "https://cloud.google.com/compute/docs/instances/about-flex-start-vms"
FLEX_START_MAX_RUN = timedelta(days=7)
# The shortest max run duration Compute Engine takes: "The minimum time limit is 30 seconds, and the maximum
# is 120 days" (Restrictions of https://cloud.google.com/compute/docs/instances/limit-vm-runtime, read
# 2026-11-24 through its hl=zh-cn copy: "最短时间限制为 30 秒,最长时间限制为 120 天"); the flex-start pages
# state no other floor. Cluster Toolkit's slurm-gcp nodeset refuses less than 10 minutes for dws_flex
# (max_run_duration >= 600, community/modules/compute/schedmd-slurm-gcp-v6-nodeset/variables.tf, commit
# 00f1767): that is the toolkit's own policy, stricter than the API, so it is not the error here; a duration
# shorter than the cluster's lifetime.ttl is warned about instead (preflight gcp_capacity).
FLEX_START_MIN_RUN = timedelta(seconds=30)


# VMs one compact placement policy holds at each max distance, as slurm-gcp sizes its placement groups
# (resume.py, calculate_chunk_size: 22 at 1; 256 for A3 machine types and 150 for others at 2; 1500 at 3).
SLURM_GCP_RESUME = (
    "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/main/community/modules/scheduler/"
    "schedmd-slurm-gcp-v6-controller/modules/slurm_files/scripts/resume.py"
)


def vms_within(max_distance: int, instance_type: str) -> int:
    """How many VMs slurm-gcp puts under one compact policy of this max distance."""
    if max_distance == 1:
        return 22
    if max_distance == 2:
        return 256 if instance_type.startswith("a3") else 150
    return 1500


def compact_max_distance(instance_type: str, count: int) -> int | None:
    """The tightest max distance the series accepts that still holds ``count`` VMs (None: the series
    takes no max distance). Not always 3: a small group gets the closer placement it fits in."""
    accepted = sorted(series_of(instance_type).max_distance)
    if not accepted:
        return None
    return next((d for d in accepted if count <= vms_within(d, instance_type)), accepted[-1])


# OAuth scopes every VM's service account (the project's default compute service account) gets: what the
# Ops Agent needs to send logs and metrics, and read-write Cloud Storage for data and checkpoints
# (https://cloud.google.com/stackdriver/docs/solutions/agents/ops-agent/authorization,
# https://cloud.google.com/compute/docs/access/service-accounts#scopes_best_practice).
VM_SCOPES = (
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/monitoring.write",
    "https://www.googleapis.com/auth/devstorage.read_write",
)


def series_of(instance_type: str) -> GcpSeries:
    """The rules for a machine type (the first prefix that matches; a conservative default otherwise)."""
    return next((s for s in SERIES if instance_type.startswith(s.prefix)), _DEFAULT_SERIES)


# --------------------------------------------------------------------------------------------------
# One OS release, and so one Slurm release, per cluster


def cluster_os_release(spec: ClusterSpec) -> str:
    """The OS release of the cluster's plain-Ubuntu nodes: that of the first group whose series boots an
    image of its own (the GPU nodes'), else ``DEFAULT_OS_RELEASE``."""
    for group in spec.node_groups:
        series = series_of(group.instance_type)
        if series.own_image:
            return IMAGE_OS_RELEASE[series.image_family]
    return DEFAULT_OS_RELEASE


def image_family(spec: ClusterSpec, instance_type: str) -> tuple[str, str]:
    """(project, family) a type boots in this cluster when the spec names no image: its series' own
    family, or plain Ubuntu of the cluster's OS release (a head node beside A3 Mega boots 24.04)."""
    series = series_of(instance_type)
    if series.own_image:
        return series.image_project, series.image_family
    return PLAIN_UBUNTU[cluster_os_release(spec)]


def group_os_release(spec: ClusterSpec, instance_type: str, image: str | None) -> str | None:
    """The OS release (catalog.os_releases key) a type boots in this cluster; None when ``image`` (the
    spec's ``provider.image``) names the image (every group then boots that one image)."""
    if image:
        return None
    return IMAGE_OS_RELEASE[image_family(spec, instance_type)[1]]


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
RESERVATION_NAME = re.compile(
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
