"""Azure preflight checks: a spec judged against the Azure facts of ``gpufleet.catalog.azure`` and the
catalog.

Checks (all offline, from the spec and the catalog):
- ``azure_ib_domain``: a compute group is one scale set, one InfiniBand domain: at most
  ``provider.ib_domain_max_vms`` VMs (100 unless Microsoft raised it); several InfiniBand groups share no
  InfiniBand;
- ``azure_sku_region``: the region offers the size, where the catalog lists its regions (else the az
  command that tells);
- ``azure_vcpu_quota``: the vCPUs of each quota family the cluster needs in the region, to compare with
  the subscription's quota (which only Azure knows: the az command that reads it);
- ``azure_image``: every GPU group has an image of its size's architecture (arm64 for GB200/GB300, for
  which Microsoft publishes no HPC image URN) and Hyper-V generation (ND v5/v6 boot Gen2 only), and gpufleet
  knows its Ubuntu release (the head boots the same, for one Slurm);
- ``azure_nvlink_domain``: GB200/GB300 groups whose size is not a multiple of the NVLink domain (18 VMs);
- ``azure_lustre_size``: Azure Managed Lustre's sizes per SKU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gpufleet.catalog import Catalog
from gpufleet.catalog.azure import (
    AMLFS_SIZES,
    AMLFS_SIZES_SOURCE,
    AZURE_ARCH,
    ND_H100_DOC,
    QUOTA_COMMAND,
    QUOTA_FAMILIES,
    SKU_COMMAND,
    amlfs_size_problem,
    gpu_image,
)
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import AzureLustreFilesystem, AzureProvider, ClusterSpec, FabricKind, NodeGroup, Role

PROVIDERS = ("azure",)


def _provider(spec: ClusterSpec) -> AzureProvider:
    assert isinstance(spec.provider, AzureProvider)
    return spec.provider


def _path(spec: ClusterSpec, group: NodeGroup, field: str = "") -> str:
    index = spec.node_groups.index(group)
    return f"node_groups[{index}]" + (f".{field}" if field else "")


@check("azure_ib_domain", providers=PROVIDERS)
def azure_ib_domain(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = _provider(spec)
    limit = provider.ib_domain_max_vms
    ib_groups = []
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.fabric.kind is not FabricKind.INFINIBAND:
            continue
        ib_groups.append(group)
        if group.count > limit:
            parts = -(-group.count // limit)
            yield Finding(
                Severity.ERROR,
                "azure_ib_domain",
                _path(spec, group, "count"),
                f"group '{group.name}' has {group.count} VMs; InfiniBand links only the VMs of one scale "
                f"set, which holds at most {limit} (provider.ib_domain_max_vms; Azure's default is 100). "
                f"Split it into {parts} groups of at most {limit} (each its own scale set and InfiniBand "
                "domain: jobs that span groups get no InfiniBand between them), or, where Microsoft "
                "raised the subscription's limit on request, set provider.ib_domain_max_vms",
            )
    if len(ib_groups) > 1:
        names = ", ".join(group.name for group in ib_groups)
        yield Finding(
            Severity.WARNING,
            "azure_ib_domain",
            _path(spec, ib_groups[1]),
            f"groups {names} are separate scale sets, so separate InfiniBand domains: a job across them "
            "gets no InfiniBand between them (validation runs across every compute node). Put the nodes of "
            "one job in one group",
        )


@check("azure_sku_region", providers=PROVIDERS)
def azure_sku_region(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    location = _provider(spec).location
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.provider != "azure":
            continue
        command = SKU_COMMAND.format(location=location, size=group.instance_type)
        if item.regions and location not in item.regions:
            yield Finding(
                Severity.ERROR,
                "azure_sku_region",
                "provider.location",
                f"{group.instance_type} is offered in {', '.join(item.regions)} (the catalog's sources), not "
                f"{location}: pick one of those, or confirm with '{command}' and add the region to the "
                "catalog with its source",
            )
        elif not item.regions and item.gpu is not None:
            yield Finding(
                Severity.INFO,
                "azure_sku_region",
                "provider.location",
                f"the catalog lists no regions for {group.instance_type} (Microsoft publishes no list "
                f"gpufleet could source); confirm {location} offers it: '{command}' (no "
                "'NotAvailableForSubscription' restriction)",
            )


@check("azure_vcpu_quota", providers=PROVIDERS)
def azure_vcpu_quota(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    location = _provider(spec).location
    needed: Counter[str] = Counter()
    unknown: dict[str, int] = {}
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.cpus is None or item.provider != "azure":
            continue
        family = QUOTA_FAMILIES.get(group.instance_type)
        if family is None:
            unknown[group.instance_type] = unknown.get(group.instance_type, 0) + item.cpus * group.count
        else:
            needed[family] += item.cpus * group.count
    for family, vcpus in sorted(needed.items()):
        yield Finding(
            Severity.INFO,
            "azure_vcpu_quota",
            "provider.location",
            f"the cluster needs {vcpus} vCPUs of quota family {family} in {location}; Azure refuses the VMs "
            f"beyond the subscription's quota: '{QUOTA_COMMAND.format(location=location, family=family)}' "
            "shows it (request more in the portal's Quotas page)",
        )
    for size, vcpus in sorted(unknown.items()):
        yield Finding(
            Severity.WARNING,
            "azure_vcpu_quota",
            "provider.location",
            f"{size} needs {vcpus} vCPUs in {location}, of a quota family gpufleet's catalog does not name; "
            f"find it with 'az vm list-skus --location {location} --size {size} --query \"[].family\"' and "
            "check its usage with 'az vm list-usage'",
        )


@check("azure_image", providers=PROVIDERS)
def azure_image(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    image = _provider(spec).image
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.gpu is None or item.provider != "azure":
            continue
        wanted = AZURE_ARCH[item.cpu_arch]
        choice = gpu_image(item, image.urn, image.id, image.architecture, image.generation, image.os_release)
        if choice is None:
            yield Finding(
                Severity.ERROR,
                "azure_image",
                "provider.image",
                f"{group.instance_type} is {item.cpu_arch} (Grace), and Microsoft publishes no Ubuntu HPC "
                "image URN for it (azhpc-images lists x64 ones only): set provider.image.id to an Arm64 Gen2 "
                "image (a Compute Gallery image built with azhpc-images' GB200 scripts) or "
                "provider.image.urn to an Arm64 marketplace image, with architecture: Arm64",
            )
            return
        if choice.architecture is None:
            yield Finding(
                Severity.ERROR,
                "azure_image",
                "provider.image.architecture",
                f"gpufleet does not know the architecture of {choice.id or choice.urn}: set "
                f"provider.image.architecture ({wanted} for {group.instance_type})",
            )
        elif choice.architecture != wanted:
            yield Finding(
                Severity.ERROR,
                "azure_image",
                "provider.image",
                f"{choice.id or choice.urn} is built for {choice.architecture}, and {group.instance_type} is "
                f"{item.cpu_arch}: give an image built for {wanted}",
            )
        if choice.generation != "V2":
            yield Finding(
                Severity.ERROR,
                "azure_image",
                "provider.image.generation",
                f"{group.instance_type} boots Generation 2 images only ({ND_H100_DOC}): give a V2 image",
            )
        if choice.os_release is None:
            yield Finding(
                Severity.ERROR,
                "azure_image",
                "provider.image.os_release",
                f"gpufleet does not know the Ubuntu release of {choice.id or choice.urn}; the head node "
                "boots the same release (one build of Slurm): set provider.image.os_release (ubuntu-22.04 or "
                "ubuntu-24.04)",
            )
        return


@check("azure_nvlink_domain", providers=PROVIDERS)
def azure_nvlink_domain(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        domain = item.fabric.nvlink_domain_vms if item is not None else None
        if domain is None or Role.COMPUTE not in group.roles:
            continue
        if group.count % domain:
            below = group.count - group.count % domain
            above = below + domain
            choices = f"{below} or {above}" if below else str(above)
            yield Finding(
                Severity.WARNING,
                "azure_nvlink_domain",
                _path(spec, group, "count"),
                f"{group.instance_type} shares a multi-node NVLink domain of {domain} VMs (a rack, "
                f"{domain * (item.gpu_count if item else 0)} GPUs); {group.count} VMs leave "
                f"{domain - group.count % domain} of a rack's NVLink unused or split a job across racks over "
                f"InfiniBand only: use {choices}",
            )


@check("azure_lustre_size", providers=PROVIDERS)
def azure_lustre_size(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    fs = spec.filesystem
    if not isinstance(fs, AzureLustreFilesystem):
        return
    problem = amlfs_size_problem(fs.sku, fs.size_tib)
    if problem:
        yield Finding(
            Severity.ERROR, "azure_lustre_size", "filesystem.size_tib", f"{problem} ({AMLFS_SIZES_SOURCE})"
        )
        return
    limit = AMLFS_SIZES[fs.sku].max_tib
    if fs.size_tib > limit:
        yield Finding(
            Severity.WARNING,
            "azure_lustre_size",
            "filesystem.size_tib",
            f"{fs.sku} goes to {limit} TiB without a support ticket ({AMLFS_SIZES_SOURCE}); "
            f"{fs.size_tib} TiB needs Microsoft to raise it first, else the create fails",
        )
