"""AWS preflight checks: instance types that exist, EFA layout, placement vs reserved capacity, FSx sizes,
zones and regions.

Offline, from the spec and the catalog; the AWS rules come from ``gpufleet.catalog.aws`` and
``gpufleet.catalog.aws_interfaces`` (pure modules, no cloud SDK), the same code the Pulumi program uses.
``GpuClusterAws`` runs these (with the common checks) before it registers anything.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from functools import cache

from gpufleet.catalog import Catalog
from gpufleet.catalog import aws as rules
from gpufleet.catalog.aws_interfaces import EFA_LAYOUT_DOC, efa_count, group_layout
from gpufleet.preflight.base import Finding, check
from gpufleet.preflight.common import _group_path as _path
from gpufleet.preflight.common import os_release_findings
from gpufleet.severity import Severity
from gpufleet.spec.model import (
    AwsProvider,
    CapacityMode,
    ClusterSpec,
    FabricKind,
    FsxLustreFilesystem,
)

AWS = ("aws",)


def _provider(spec: ClusterSpec) -> AwsProvider:
    assert isinstance(spec.provider, AwsProvider)
    return spec.provider


@cache
def ec2_instance_types() -> frozenset[str]:
    """Every EC2 instance type, from botocore's offline EC2 service model (the ``InstanceType`` enum that
    ships with the installed botocore; no call is made). Newer types than the installed botocore are
    unknown here: upgrading boto3/botocore teaches them."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("ec2")
    return frozenset(model.shape_for("InstanceType").enum)


@check("aws_instance_type_exists", providers=AWS)
def instance_type_exists(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """A type EC2 does not have is an error here, not at ``pulumi up``."""
    known = ec2_instance_types()
    for group in spec.node_groups:
        if group.instance_type in known:
            continue
        close = difflib.get_close_matches(group.instance_type, sorted(known), n=3, cutoff=0.75)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        yield Finding(
            Severity.ERROR,
            "aws_instance_type_exists",
            f"{_path(spec, group.name)}.instance_type",
            f"'{group.instance_type}' is not an EC2 instance type (botocore's EC2 model lists "
            f"{len(known)}){hint}",
        )


@check("aws_efa_layout", providers=AWS)
def efa_layout(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """EFA asked where the type has none, and EFA interface counts the type's network cards can't hold."""
    if spec.fabric.kind is not FabricKind.EFA:
        return
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        path = f"{_path(spec, group.name)}.instance_type"
        if item is None or item.fabric.kind is not FabricKind.EFA:
            efa_types = sorted(i.name for i in catalog.for_provider("aws") if i.fabric.kind is FabricKind.EFA)
            yield Finding(
                Severity.ERROR,
                "aws_efa_supported",
                path,
                f"fabric is efa but gpufleet's catalog knows no EFA on {group.instance_type}; pick an EFA "
                f"type ({', '.join(efa_types)}) or set fabric: ethernet",
            )
            continue
        cards = item.fabric.network_cards
        if cards is not None:  # the cards that can take an EFA interface (card 0 of some types cannot)
            cards -= item.fabric.efa_first_card or 0
        count = efa_count(spec, group, item)
        if cards is None:
            yield Finding(
                Severity.ERROR,
                "aws_efa_layout",
                path,
                f"the catalog gives no network card count for {group.instance_type}, so its EFA "
                f"interfaces cannot be laid out as AWS documents ({EFA_LAYOUT_DOC}); add "
                "fabric.network_cards to the catalog entry",
            )
        elif cards < count <= item.fabric.interfaces:  # above the catalog's count: fabric_interfaces says so
            yield Finding(
                Severity.ERROR,
                "aws_efa_interfaces",
                "fabric.interfaces",
                f"{count} EFA interfaces asked; {group.instance_type} has {cards} EFA-capable network "
                f"card(s) and AWS documents one EFA interface per card. Set fabric.interfaces to {cards} "
                "or less, or drop it to use the catalog's count",
            )
        elif count == 0:
            yield Finding(
                Severity.ERROR,
                "aws_efa_interfaces",
                "fabric.interfaces",
                "fabric is efa but fabric.interfaces is 0: no EFA interface would be attached. Drop "
                f"fabric.interfaces to use the catalog's {item.fabric.interfaces}",
            )
        elif count < item.fabric.interfaces:
            yield Finding(
                Severity.WARNING,
                "aws_efa_interfaces",
                "fabric.interfaces",
                f"{count} of {group.instance_type}'s {item.fabric.interfaces} EFA interfaces asked: about "
                f"{item.fabric.bandwidth_gbps * count / item.fabric.interfaces:g} of "
                f"{item.fabric.bandwidth_gbps:g} Gbps. Drop fabric.interfaces for the full fabric",
            )


@check("aws_placement", providers=AWS)
def placement(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """Which compute groups go into the cluster placement group, and what reserved capacity implies."""
    for group in spec.node_groups:
        if group.capacity.mode is CapacityMode.FLEX_START:
            yield Finding(
                Severity.ERROR,
                "aws_placement",
                f"{_path(spec, group.name)}.capacity.mode",
                "flex_start is GCP's Dynamic Workload Scheduler; on AWS, time-bound GPU capacity is a "
                "Capacity Block: use mode: capacity_block with its reservation id",
            )
    for group in spec.compute_groups:
        mode = group.capacity.mode
        path = f"{_path(spec, group.name)}.capacity"
        if mode is CapacityMode.CAPACITY_BLOCK:
            yield Finding(
                Severity.INFO,
                "aws_placement",
                path,
                "a Capacity Block is already co-located by AWS: no placement group is created for "
                f"group '{group.name}' ({rules.CAPACITY_BLOCK_DOC})",
            )
        elif mode is CapacityMode.RESERVATION and group.capacity.placement_group is not None:
            yield Finding(
                Severity.INFO,
                "aws_placement",
                path,
                f"group '{group.name}' launches into the existing placement group "
                f"'{group.capacity.placement_group}', where its capacity reservation was made "
                f"({rules.ODCR_PLACEMENT_DOC})",
            )
        elif mode is CapacityMode.RESERVATION:
            yield Finding(
                Severity.WARNING,
                "aws_placement",
                path,
                f"group '{group.name}' targets a capacity reservation, so gpufleet creates no placement "
                "group for it: nodes are as close as the reservation's capacity is. A reservation made "
                "inside a cluster placement group only matches instances launched into that group "
                f"({rules.ODCR_PLACEMENT_DOC}): name it in capacity.placement_group",
            )
        if mode is CapacityMode.SPOT and group.count > 1:
            yield Finding(
                Severity.WARNING,
                "aws_spot",
                path,
                f"group '{group.name}' runs {group.count} nodes on spot: one interruption ends every "
                "multi-node job and a cluster placement group makes spot capacity scarcer; use on_demand, "
                "a reservation or a Capacity Block for long runs",
            )
    controller = spec.controller_group
    if controller.capacity.mode is not CapacityMode.ON_DEMAND:
        yield Finding(
            Severity.ERROR if controller.capacity.mode is CapacityMode.SPOT else Severity.WARNING,
            "aws_head_capacity",
            f"{_path(spec, controller.name)}.capacity.mode",
            f"the head node runs slurmctld and is bought as '{controller.capacity.mode.value}': when it "
            "goes, the whole cluster goes. Set capacity.mode: on_demand for the controller group",
        )


# The id the examples and the message above show (examples/aws-p5-capacity-block.yaml): an up with it makes
# everything but the fleet first (AWS audit 2026-11-27 M4).
PLACEHOLDER_RESERVATION = "cr-0123456789abcdef0"


@check("aws_reservation_ids", providers=AWS)
def reservation_ids(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.node_groups:
        cap = group.capacity
        path = f"{_path(spec, group.name)}.capacity"
        if cap.reservation is not None and not re.match(rules.RESERVATION_ID, cap.reservation):
            yield Finding(
                Severity.ERROR,
                "aws_reservation_ids",
                f"{path}.reservation",
                f"'{cap.reservation}' is not an EC2 capacity reservation id; expected cr- and 17 hex "
                "digits, e.g. cr-0123456789abcdef0 (aws ec2 describe-capacity-reservations lists them)",
            )
        elif cap.reservation == PLACEHOLDER_RESERVATION:
            yield Finding(
                Severity.ERROR,
                "aws_reservation_ids",
                f"{path}.reservation",
                f"'{cap.reservation}' is the example's placeholder, not a reservation of yours: an up would "
                "make the VPC, NAT gateway, head node and file system before the fleet fails on it. Name "
                "your Capacity Block or ODCR (aws ec2 describe-capacity-reservations lists them)",
            )
        arn = cap.reservation_group_arn
        if arn is not None and not re.match(rules.RESERVATION_GROUP_ARN, arn):
            yield Finding(
                Severity.ERROR,
                "aws_reservation_ids",
                f"{path}.reservation_group_arn",
                f"'{arn}' is not a resource group ARN; expected "
                "arn:aws:resource-groups:<region>:<account>:group/<name>",
            )
        elif arn is not None and f":{_provider(spec).region}:" not in arn:
            yield Finding(
                Severity.ERROR,
                "aws_reservation_ids",
                f"{path}.reservation_group_arn",
                f"the resource group is not in the cluster's region {_provider(spec).region}; instances "
                "can only use reservations of their own region and zone",
            )


# Bucket names that stand for "your bucket" in examples and docs: the FSx link to one fails 10-20 minutes
# into an up, after the FSx creation, while the fleet already runs. "amzn-s3-demo-" is the prefix of AWS's
# documentation buckets, which no bucket may start with ("Bucket names must not start with the prefix
# amzn-s3-demo-", docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html, read
# 2026-11-24); the others are the usual stand-ins.
PLACEHOLDER_BUCKET = re.compile(r"^(my-|your-|amzn-s3-demo-|example-|placeholder|changeme)|(^|-)example(-|$)")


def _bucket(s3_path: str) -> str:
    return s3_path.removeprefix("s3://").split("/", 1)[0]


@check("aws_fsx", providers=AWS)
def fsx(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    fs = spec.filesystem
    if not isinstance(fs, FsxLustreFilesystem):
        return
    repository = fs.data_repository
    if repository is not None and PLACEHOLDER_BUCKET.search(_bucket(repository.s3_path)):
        yield Finding(
            Severity.ERROR,
            "aws_fsx_bucket",
            "filesystem.data_repository.s3_path",
            f"{repository.s3_path} names a placeholder bucket ({_bucket(repository.s3_path)}); FSx links "
            "to it after the file system is made, 10-20 minutes into 'up', while the nodes already bill. "
            "Set s3_path to a bucket of yours in the cluster's region, or remove data_repository",
        )
    if not rules.fsx_size_ok(fs.size_gib):
        below, above = rules.fsx_sizes_near(fs.size_gib)
        yield Finding(
            Severity.ERROR,
            "aws_fsx_size",
            "filesystem.size_gib",
            f"{fs.size_gib} GiB is not a size FSx for Lustre {fs.deployment_type} takes: 1200, 2400, then "
            f"multiples of 2400 GiB ({rules.FSX_CREATE_DOC}). Use {below} or {above}",
        )
    persistent = fs.deployment_type == "PERSISTENT_2"
    if persistent and fs.throughput_per_tib not in rules.FSX_PERSISTENT_2_THROUGHPUT:
        allowed = ", ".join(str(v) for v in rules.FSX_PERSISTENT_2_THROUGHPUT)
        yield Finding(
            Severity.ERROR,
            "aws_fsx_throughput",
            "filesystem.throughput_per_tib",
            f"PERSISTENT_2 takes a throughput of {allowed} MB/s per TiB, not {fs.throughput_per_tib} "
            f"({rules.FSX_LUSTRE_CONFIG_DOC}); e.g. throughput_per_tib: 250",
        )


@check("aws_zone_region", providers=AWS)
def zone_region(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """The single zone holds every node and the file system; the catalog says where each type is sold."""
    provider = _provider(spec)
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.provider != "aws":
            continue
        path = f"{_path(spec, group.name)}.instance_type"
        if item.regions and provider.region not in item.regions:
            # A region the offerings source did not read is unknown, not refused (catalog/aws.py).
            known = provider.region in rules.AWS_OFFERINGS_REGIONS
            where = (
                f"is not offered in {provider.region} as far as the catalog knows"
                if known
                else f"may not be offered in {provider.region} (the catalog's source did not read it)"
            )
            yield Finding(
                Severity.ERROR if known else Severity.WARNING,
                "aws_type_region",
                path,
                f"{group.instance_type} {where}; it is offered in {', '.join(item.regions)}. Change "
                "provider.region and provider.zone (aws ec2 describe-instance-type-offerings --region R "
                f"--filters Name=instance-type,Values={group.instance_type} says where)",
            )
        elif item.zones and provider.zone not in item.zones:
            yield Finding(
                Severity.ERROR,
                "aws_type_zone",
                "provider.zone",
                f"{group.instance_type} is not offered in {provider.zone} as far as the catalog knows; use "
                f"one of {', '.join(z for z in item.zones if z.startswith(provider.region))}",
            )
    if provider.subnet_id is not None:
        yield Finding(
            Severity.INFO,
            "aws_existing_network",
            "provider.subnet_id",
            f"gpufleet uses subnet {provider.subnet_id} as it is: it must be in {provider.zone} (EFA does "
            "not cross zones), reach the internet through a NAT gateway for packages, and have a free "
            "address per node",
        )


@check("aws_address_space", providers=AWS)
def address_space(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """Interfaces that carry an IP address must fit the private subnet gpufleet creates."""
    if _provider(spec).subnet_id is not None:
        return
    needed = 0
    for group in spec.node_groups:
        try:
            slots = group_layout(spec, group, catalog.get(group.instance_type))
        except ValueError:  # more EFA than network cards: aws_efa_layout reports it
            continue
        needed += group.count * sum(1 for s in slots if s.interface_type != "efa-only")
    if needed > rules.PRIVATE_SUBNET_ADDRESSES:
        yield Finding(
            Severity.ERROR,
            "aws_address_space",
            "node_groups",
            f"the nodes need {needed} private addresses; the subnet gpufleet creates "
            f"({rules.PRIVATE_SUBNET_CIDR}) has {rules.PRIVATE_SUBNET_ADDRESSES}. Lower the counts",
        )


@check("aws_compute_gpu_image", providers=AWS)
def gpu_image(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    ami = _provider(spec).ami
    if ami.id is not None:
        archs = sorted({item.cpu_arch for g in spec.node_groups if (item := catalog.get(g.instance_type))})
        if len(archs) > 1:
            yield Finding(
                Severity.ERROR,
                "aws_ami_pinned",
                "provider.ami.id",
                f"the node groups mix CPU architectures ({', '.join(archs)}) but provider.ami.id pins one "
                f"image for every node; drop ami.id and name an ami.family, which gpufleet resolves per "
                "architecture",
            )
            return
        yield Finding(
            Severity.INFO,
            "aws_ami_pinned",
            "provider.ami.id",
            f"every node boots {ami.id}: it must be an {archs[0] if archs else 'x86_64'} Ubuntu image in "
            f"{_provider(spec).region}",
        )
        return
    gpu_groups = [g for g in spec.compute_groups if (item := catalog.get(g.instance_type)) and item.gpu]
    if gpu_groups and not ami.family.startswith("dlami"):
        yield Finding(
            Severity.INFO,
            "aws_ami_family",
            "provider.ami.family",
            f"GPU nodes boot plain {ami.family}: the roles install the NVIDIA driver and the EFA "
            "software. dlami-base-ubuntu-22.04 starts with both",
        )


@check("aws_os_release", providers=("aws",))
def aws_os_release(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """Groups on two OS releases get two builds of the one Slurm (catalog.os_releases): groups without GPUs
    boot the plain Ubuntu of the GPU family's release (rules.group_family); ami.id is one image for all."""
    ami = _provider(spec).ami
    if ami.id is not None:
        return
    releases = {}
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        family = rules.group_family(ami.family, item is not None and item.gpu is not None)
        releases[group.name] = rules.FAMILY_OS_RELEASE[family]
    yield from os_release_findings(
        "aws_os_release",
        spec,
        releases,
        "one provider.ami.family, or one ami.id for all",
    )
