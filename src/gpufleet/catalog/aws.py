"""AWS facts that the Pulumi program and the preflight checks share, each with the page it comes from.

Pure data and functions: no cloud SDK is imported here, so ``gpufleet check`` stays fast. Creates nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.spec.model import CapacityMode

# --------------------------------------------------------------------------------------------------
# Placement groups and reserved capacity

PLACEMENT_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups.html"
CAPACITY_BLOCK_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html"
ODCR_PLACEMENT_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/cr-cpg.html"


# CapacityReservationPreference 'capacity-reservations-only': "The instance will only run in a Capacity
# Reservation or Capacity Reservation group. If capacity isn't available, the instance will fail to launch."
RESERVATION_ONLY = "capacity-reservations-only"
RESERVATION_ONLY_DOC = (
    "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/"
    "aws-properties-ec2-launchtemplate-capacityreservationspecification.html"
)


def wants_cluster_placement_group(mode: CapacityMode) -> bool:
    """Whether gpufleet creates a cluster placement group for a group bought this way.

    On-demand and spot nodes go into a new cluster placement group (one zone, one spine: EFA's best
    case; spot keeps the default 'terminate' interruption behaviour, which placement groups require).
    Reserved capacity is already placed where AWS holds it, so gpufleet creates none:

    - a Capacity Block is launched by its reservation id alone; its instances are co-located by AWS in
      an EC2 UltraCluster, and a new placement group would not match the block (CAPACITY_BLOCK_DOC);
    - a targeted On-Demand Capacity Reservation matches on type, platform, zone and tenancy; one made
      in a cluster placement group matches only instances launched into *that* group, which gpufleet
      does not own, and a new empty group would not match it (ODCR_PLACEMENT_DOC): the spec names it in
      ``capacity.placement_group`` and the group's instances launch into it.
    """
    return mode in (CapacityMode.ON_DEMAND, CapacityMode.SPOT)


# --------------------------------------------------------------------------------------------------
# EC2 Fleet: one launch request per compute group

# An EC2 Fleet of type 'instant' is one synchronous launch request (INSTANT_FLEET_DOC). MinTargetCapacity:
# "The minimum target capacity for On-Demand Instances in the fleet. If this minimum capacity isn't
# reached, no instances are launched. Constraints: Maximum value of 1000. Supported only for fleets of
# type instant. At least one of the following must be specified: SingleAvailabilityZone |
# SingleInstanceType" (FLEET_OPTIONS_DOC; the same for Spot). Capacity Blocks take instant fleets with the
# target capacity type 'capacity-block' and never fall back to On-Demand (FLEET_CAPACITY_BLOCK_DOC).
INSTANT_FLEET_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instant-fleet.html"
FLEET_OPTIONS_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_OnDemandOptionsRequest.html"
FLEET_CAPACITY_BLOCK_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-launch-instances-capacity-blocks-walkthrough.html"
FLEET_MIN_TARGET_CAPACITY_MAX = 1000
# Capacity Reservation usage by instant fleets (FLEET_OPTIONS_DOC: CapacityReservationOptions).
USE_RESERVATIONS_FIRST = "use-capacity-reservations-first"


def fleet_target_capacity_type(mode: CapacityMode) -> str:
    """The fleet's ``DefaultTargetCapacityType`` for a capacity mode (reservations are on-demand)."""
    return {CapacityMode.SPOT: "spot", CapacityMode.CAPACITY_BLOCK: "capacity-block"}.get(mode, "on-demand")


# --------------------------------------------------------------------------------------------------
# FSx for Lustre

FSX_CREATE_DOC = "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html"
FSX_LUSTRE_CONFIG_DOC = (
    "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html"
)
FSX_ACCESS_DOC = "https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html"

# SSD storage for SCRATCH_2 and PERSISTENT_2: 1200 GiB, 2400 GiB, then increments of 2400 GiB.
FSX_FIRST_STEP_GIB = 1200
FSX_STEP_GIB = 2400
# PerUnitStorageThroughput (MB/s per TiB) of PERSISTENT_2 SSD; SCRATCH_2 has a fixed 200.
FSX_PERSISTENT_2_THROUGHPUT = (125, 250, 500, 1000)
FSX_SCRATCH_2_THROUGHPUT = 200
# Lustre traffic: TCP 988 and 1018-1023, between the file servers and from every client.
LUSTRE_PORTS = ((988, 988), (1018, 1023))


def fsx_size_ok(size_gib: int) -> bool:
    return size_gib == FSX_FIRST_STEP_GIB or (size_gib > 0 and size_gib % FSX_STEP_GIB == 0)


def fsx_sizes_near(size_gib: int) -> tuple[int, int]:
    """The valid sizes just below (or the smallest) and just above ``size_gib``."""
    if size_gib <= FSX_FIRST_STEP_GIB:
        return FSX_FIRST_STEP_GIB, FSX_FIRST_STEP_GIB
    below = max(FSX_FIRST_STEP_GIB, size_gib // FSX_STEP_GIB * FSX_STEP_GIB)
    above = -(-size_gib // FSX_STEP_GIB) * FSX_STEP_GIB
    return below, above


# --------------------------------------------------------------------------------------------------
# Instance metadata, images, IAM

IMDS_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html"
# IMDSv2 tokens travel one hop by default; AWS recommends 2 where containers on the node must reach it.
IMDS_HOP_LIMIT = 2

AMI_DOC = "https://documentation.ubuntu.com/aws/aws-how-to/instances/find-ubuntu-images/"
# Release notes name each image "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) YYYYMMDD"; the
# arm64 (Graviton, Grace) release is "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)
# YYYYMMDD" (the DLAMI release notes, DLAMI_DOC; ParallelCluster's test utilities look the arm64 DLAMIs up by
# the same name). Canonical's arm64 images swap "amd64" for "arm64" in the name (AMI_DOC).
DLAMI_DOC = "https://docs.aws.amazon.com/dlami/latest/devguide/"
# The regions the catalog's ``regions`` of AWS types were read for (source aws-instance-type-offerings in
# catalog/instances.yaml: EC2's DescribeInstanceTypeOfferings per region as moto 5.2.5 records it, read
# 2026-11-27). A type's list is complete for these; a region outside them is unknown, not refused.
AWS_OFFERINGS_REGIONS = frozenset(
    {
        "af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1",
        "ap-south-2", "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4",
        "ap-southeast-5", "ca-central-1", "ca-west-1", "eu-central-1", "eu-central-2", "eu-north-1",
        "eu-south-1", "eu-south-2", "eu-west-1", "eu-west-2", "eu-west-3", "il-central-1", "me-central-1",
        "me-south-1", "sa-east-1", "us-east-1", "us-east-2", "us-west-1", "us-west-2",
    }
)  # fmt: skip
CANONICAL_OWNER = "099720109477"
AMAZON_OWNER = "amazon"
# EC2's names for the CPU architectures (DescribeImages' architecture filter), as the catalog's cpu_arch.
ARCHITECTURES = ("x86_64", "arm64")


@dataclass(frozen=True)
class AmiQuery:
    """How ``aws.ec2.get_ami`` finds an image family: newest image of this owner with this name, for
    each CPU architecture."""

    owner: str
    name_pattern: str  # x86_64
    arm64_name_pattern: str

    def pattern(self, arch: str) -> str:
        return self.arm64_name_pattern if arch == "arm64" else self.name_pattern


AMI_FAMILIES: dict[str, AmiQuery] = {
    "ubuntu-22.04": AmiQuery(
        CANONICAL_OWNER,
        "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*",
        "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-arm64-server-*",
    ),
    "ubuntu-24.04": AmiQuery(
        CANONICAL_OWNER,
        "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
        "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*",
    ),
    "dlami-base-ubuntu-22.04": AmiQuery(
        AMAZON_OWNER,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
        "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
    ),
    "dlami-base-ubuntu-24.04": AmiQuery(
        AMAZON_OWNER,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
        "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *",
    ),
}
# What each family's images ship of the NVIDIA stack, and so what the GPU roles verify or install per
# component, is the image manifests' (catalog/images.yaml, whose ``families`` name these keys). With
# ``ami.id``, ``ami.family`` says what the image is.
# Nodes without GPUs (the head node) run the plain Ubuntu release of the GPU image family.
PLAIN_FAMILY = {
    "ubuntu-22.04": "ubuntu-22.04",
    "ubuntu-24.04": "ubuntu-24.04",
    "dlami-base-ubuntu-22.04": "ubuntu-22.04",
    "dlami-base-ubuntu-24.04": "ubuntu-24.04",
}
# The OS release (catalog.os_releases) of each family: a family and its PLAIN_FAMILY share one
# (tests/catalog/test_os_releases.py), so the head node and the GPU nodes of a cluster share a userland,
# one build of Slurm and one Python. The names say it: Canonical's "ubuntu-jammy-22.04"/"ubuntu-noble-24.04"
# and the DLAMI's "(Ubuntu 22.04)"/"(Ubuntu 24.04)" (AMI_FAMILIES).
FAMILY_OS_RELEASE = {
    "ubuntu-22.04": "ubuntu-22.04",
    "ubuntu-24.04": "ubuntu-24.04",
    "dlami-base-ubuntu-22.04": "ubuntu-22.04",
    "dlami-base-ubuntu-24.04": "ubuntu-24.04",
}


def group_family(family: str, has_gpu: bool) -> str:
    """The family a group boots: the spec's for GPU groups, its plain Ubuntu release for the others."""
    return family if has_gpu else PLAIN_FAMILY[family]


SSM_POLICY = "AmazonSSMManagedInstanceCore"


# AWS's partitions by their regions' names (the ARN's partition; each has its own domain, which boto3 knows:
# ``MungeKeyFrom.endpoint``): botocore 1.44.8 botocore/data/endpoints.json, "partitions" (partition,
# regionRegex), read 2026-11-28. A region matching none is in "aws", as botocore resolves it.
PARTITIONS = (
    ("aws-cn", r"^cn\-\w+\-\d+$"),
    ("aws-us-gov", r"^us\-gov\-\w+\-\d+$"),
    ("aws-iso", r"^us\-iso\-\w+\-\d+$"),
    ("aws-iso-b", r"^us\-isob\-\w+\-\d+$"),
    ("aws-iso-e", r"^eu\-isoe\-\w+\-\d+$"),
    ("aws-iso-f", r"^us\-isof\-\w+\-\d+$"),
    ("aws-eusc", r"^eusc\-(de)\-\w+\-\d+$"),
)


def partition(region: str) -> str:
    return next((name for name, pattern in PARTITIONS if re.match(pattern, region)), "aws")


def managed_policy_arn(region: str, policy: str) -> str:
    return f"arn:{partition(region)}:iam::aws:policy/{policy}"


# --------------------------------------------------------------------------------------------------
# Network layout of a created VPC

VPC_CIDR = "10.0.0.0/16"
PRIVATE_SUBNET_CIDR = "10.0.0.0/17"  # the nodes and the file system; EFA-only interfaces take no address
PUBLIC_SUBNET_CIDR = "10.0.128.0/28"  # the NAT gateway only
PRIVATE_SUBNET_ADDRESSES = 2**15 - 5  # AWS keeps five addresses of every subnet

RESERVATION_ID = r"^cr-[0-9a-f]{8,17}$"
RESERVATION_GROUP_ARN = r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9_.-]+$"
