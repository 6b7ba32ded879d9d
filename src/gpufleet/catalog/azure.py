"""Azure facts that the preflight checks and the Pulumi component share: the InfiniBand domain (a scale set),
the images a size boots, the per-family vCPU quota, Managed Lustre's sizes, and the NVLink domain of the
GB200/GB300 sizes. Pure data and functions; no cloud SDK.

Sources (read 2026-11-27):
- InfiniBand is "configured automatically between VMs that occupy the same virtual machine scale set"
  (ND H100 v5 size page, ``ND_H100_DOC``); "All VMs within the same Availability Set or within the same
  VMSS ... will have the same partition key. VMs with different pkeys will not be able to talk to each
  other over InfiniBand" (a Microsoft engineer in NVIDIA/nccl-tests#36, ``PKEY_SOURCE``). A scale set that
  carries InfiniBand is a single placement group, "capped at 100 VMs by default" (Microsoft's HPC sizes
  page, quoted in Azure/AKS#2725, ``IB_LIMIT_SOURCE``); "This can be extended with a support request"
  (MicrosoftDocs/azure-docs#54063). A Flexible scale set takes ``singlePlacementGroup`` too
  (Azure/azure-cli#21834, for "specialty skus").
- ND H100 v5 "requires the use of Generation 2 VMs and marketplace images" (``ND_H100_DOC``). The Ubuntu
  HPC images are ``microsoft-dsvm:ubuntu-hpc:2204:latest`` and ``...:2404:latest`` (Azure/azhpc-images
  README, ``HPC_IMAGES_SOURCE``); azhpc-images publishes no arm64 marketplace URN, so a GB200/GB300 group
  names its image (``provider.image``). Canonical's URNs: Ubuntu on Azure's image list
  (``CANONICAL_IMAGES_SOURCE``).
- vCPU quota families: ``standardNDSH100v5Family`` (ND H100 v5), ``standardNDISRH200V5Family`` (ND H200
  v5), ``standardDSv5Family`` (Dsv5), from a copy of Microsoft's table of VM families in quota requests
  (``QUOTA_FAMILIES_SOURCE``); the GB200/GB300 families are not in it (None: the check says how to find it).
- Azure Managed Lustre: "AMLFS-Durable-Premium-40: 48 TB minimum, 768 TB maximum, 48 TB increment; -125:
  16, 128, 16; -250: 8, 128, 8; -500: 4, 128, 4 ... If you require storage values larger than the listed
  maximum, you can open a support ticket" (``AMLFS_SIZES_SOURCE``; a later copy lists larger maximums,
  1536/512/256/128, so a size above the older maximum is a warning, not an error). The file system
  needs a subnet of its own, "at least a /24" (pulumi-azure-native 3.29.0 ``AmlFilesystem`` docstring of
  ``filesystem_subnet``).
- The GB200/GB300 NVLink domain is a rack of 18 VMs (72 GPUs) (catalog ``fabric.nvlink_domain_vms``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Literal

from gpufleet.catalog.model import InstanceType

ND_H100_DOC = "https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series"
PKEY_SOURCE = "https://github.com/NVIDIA/nccl-tests/issues/36"
IB_LIMIT_SOURCE = "https://github.com/Azure/AKS/issues/2725"
HPC_IMAGES_SOURCE = (
    "https://github.com/Azure/azhpc-images/blob/8e9d055fb9e1f7385da734969793861c447958a1/README.md"
)
CANONICAL_IMAGES_SOURCE = "https://documentation.ubuntu.com/azure/azure-how-to/instances/find-ubuntu-images/"
QUOTA_FAMILIES_SOURCE = "https://learn.microsoft.com/en-us/azure/quotas/per-vm-quota-requests"
AMLFS_SIZES_SOURCE = "https://learn.microsoft.com/en-us/azure/azure-managed-lustre/create-file-system-portal"
QUOTA_COMMAND = "az vm list-usage --location {location} --query \"[?name.value=='{family}']\" -o table"
SKU_COMMAND = "az vm list-skus --location {location} --size {size} --all -o table"

IB_DOMAIN_DEFAULT_MAX = 100

Architecture = Literal["x64", "Arm64"]
# The catalog's cpu_arch -> Azure's image architecture names.
AZURE_ARCH: dict[str, Architecture] = {"x86_64": "x64", "arm64": "Arm64"}


@dataclass(frozen=True)
class MarketplaceImage:
    urn: str
    architecture: Architecture
    generation: Literal["V1", "V2"]
    os_release: str  # catalog.os_releases
    manifest: str  # catalog/images.yaml


HPC_2204 = "microsoft-dsvm:ubuntu-hpc:2204:latest"
HPC_2404 = "microsoft-dsvm:ubuntu-hpc:2404:latest"
MARKETPLACE_IMAGES: dict[str, MarketplaceImage] = {
    image.urn: image
    for image in (
        MarketplaceImage(HPC_2204, "x64", "V2", "ubuntu-22.04", "azure-ubuntu-hpc-2204"),
        MarketplaceImage(HPC_2404, "x64", "V2", "ubuntu-24.04", "azure-ubuntu-hpc-2404"),
        MarketplaceImage(
            "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest",
            "x64",
            "V2",
            "ubuntu-22.04",
            "ubuntu-22.04",
        ),
        MarketplaceImage(
            "Canonical:ubuntu-24_04-lts:server:latest", "x64", "V2", "ubuntu-24.04", "ubuntu-24.04"
        ),
        MarketplaceImage(
            "Canonical:ubuntu-24_04-lts:server-arm64:latest", "Arm64", "V2", "ubuntu-24.04", "ubuntu-24.04"
        ),
    )
}
# The plain Ubuntu a node without an image of its own boots (the head, CPU groups), by OS release and
# architecture: the GPU nodes' release, so every node installs the same Slurm (catalog.os_releases).
PLAIN_UBUNTU: dict[tuple[str, Architecture], str] = {
    (image.os_release, image.architecture): image.urn
    for image in MARKETPLACE_IMAGES.values()
    if image.urn.startswith("Canonical:")
}
# The image a GPU size boots by default: Microsoft's Ubuntu HPC image where one is published for it.
DEFAULT_GPU_IMAGE: dict[Architecture, str | None] = {"x64": HPC_2204, "Arm64": None}

QUOTA_FAMILIES: dict[str, str | None] = {
    "Standard_ND96isr_H100_v5": "standardNDSH100v5Family",
    "Standard_ND96isr_H200_v5": "standardNDISRH200V5Family",
    "Standard_ND128isr_NDR_GB200_v6": None,
    "Standard_ND128isr_GB300_v6": None,
    "Standard_D8s_v5": "standardDSv5Family",
    "Standard_D16s_v5": "standardDSv5Family",
}


@dataclass(frozen=True)
class AmlfsSize:
    min_tib: int
    step_tib: int
    max_tib: int  # beyond it: a support ticket


AMLFS_SIZES: dict[str, AmlfsSize] = {
    "AMLFS-Durable-Premium-40": AmlfsSize(48, 48, 768),
    "AMLFS-Durable-Premium-125": AmlfsSize(16, 16, 128),
    "AMLFS-Durable-Premium-250": AmlfsSize(8, 8, 128),
    "AMLFS-Durable-Premium-500": AmlfsSize(4, 4, 128),
}


def amlfs_size_problem(sku: str, size_tib: int) -> str | None:
    """Why ``size_tib`` is not a size of ``sku`` (below the minimum, off the step), or None."""
    size = AMLFS_SIZES[sku]
    if size_tib < size.min_tib or size_tib % size.step_tib:
        nearest = max(size.min_tib, ceil(size_tib / size.step_tib) * size.step_tib)
        return (
            f"{sku} comes in steps of {size.step_tib} TiB from {size.min_tib} TiB; {size_tib} TiB is not "
            f"one: use {nearest}"
        )
    return None


@dataclass(frozen=True)
class ImageChoice:
    """What a group boots: a marketplace URN or an image id, and what is known of it."""

    urn: str | None
    id: str | None
    architecture: Architecture | None
    generation: str
    os_release: str | None
    manifest: str | None  # catalog/images.yaml key, None for an image the table does not know


def gpu_image(
    item: InstanceType | None,
    urn: str | None,
    image_id: str | None,
    architecture: Architecture | None,
    generation: str,
    os_release: str | None,
) -> ImageChoice | None:
    """The image a GPU group boots: the spec's (``urn`` or ``image_id``) with what is known of it, else the
    size's default (Microsoft's HPC image); None where the size has no default (arm64: GB200/GB300)."""
    if image_id is not None:
        return ImageChoice(None, image_id, architecture, generation, os_release, None)
    chosen = urn or DEFAULT_GPU_IMAGE[AZURE_ARCH[item.cpu_arch if item else "x86_64"]]
    if chosen is None:
        return None
    known = MARKETPLACE_IMAGES.get(chosen)
    if known is None:
        return ImageChoice(chosen, None, architecture, generation, os_release, None)
    return ImageChoice(
        chosen, None, architecture or known.architecture, known.generation, known.os_release, known.manifest
    )


def plain_image(os_release: str | None, item: InstanceType | None) -> ImageChoice:
    """The plain Ubuntu a head or CPU node boots: the GPU nodes' release, the node's own architecture."""
    arch = AZURE_ARCH[item.cpu_arch if item else "x86_64"]
    releases = [release for release in (os_release, "ubuntu-22.04", "ubuntu-24.04") if release is not None]
    urn = next(PLAIN_UBUNTU[(release, arch)] for release in releases if (release, arch) in PLAIN_UBUNTU)
    known = MARKETPLACE_IMAGES[urn]
    return ImageChoice(urn, None, known.architecture, known.generation, known.os_release, known.manifest)


def ib_domains(count: int, max_vms: int) -> int:
    """How many scale sets (InfiniBand domains) ``count`` VMs need at ``max_vms`` per scale set."""
    return max(1, ceil(count / max_vms))


def nvlink_domain(item: InstanceType | None) -> int | None:
    """The VMs of one multi-node NVLink domain (GB200/GB300: 18), or None for a size without one."""
    return item.fabric.nvlink_domain_vms if item is not None else None
