"""The cluster's shared filesystem on Azure: Azure Managed Lustre, and the output record nodes mount it from.

``filesystem.kind: azure_lustre`` creates ``<name>-lustre``: an AML file system (``AmlFilesystem``,
azure-native ``storagecache``, REST API 2024-03-01) in the Lustre subnet of ``network.py``, of the spec's
SKU and size, in ``provider.zone`` when one is set, with a weekly 30-minute maintenance window (required).
With ``data_repository`` its HSM settings name the Blob container it hydrates from and archives to, and a
logging container beside it (both ARM ids of the spec's storage account, which lives outside the cluster's
resource group so that the durable copy outlives the cluster). ``gpufleet down`` archives the file system
to that container before anything is destroyed (``lustre_export.py``).

Before creating the file system with a container, Microsoft requires the storage account to grant the
"HPC Cache Resource Provider" the Storage Account Contributor and Storage Blob Data Contributor roles;
gpufleet does not make those assignments (they are on an account it does not own): docs/azure.md.

Nodes mount ``<mgs address>@tcp:/lustrefs``: the MGS address is the file system's ``clientInfo.mgsAddress``
and ``lustrefs`` the file system name Azure Managed Lustre gives every file system (its "Connect clients"
page: ``sudo mount -t lustre -o noatime,flock <MGS_IP>@tcp:/lustrefs /lustre``, ``MOUNT_DOC``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

from gpufleet.spec.model import AzureLustreFilesystem, ClusterSpec

MOUNT_DOC = "https://learn.microsoft.com/en-us/azure/azure-managed-lustre/connect-clients"
FILESYSTEM_NAME = "lustrefs"
MAINTENANCE_TIME = "02:00"  # a weekly 30-minute window, Sundays, UTC


@dataclass
class ClusterFilesystem:
    output: dict[str, Any]
    resource: azure.storagecache.AmlFilesystem | None


def amlfs_name(cluster: str) -> str:
    return f"{cluster}-lustre"


def build_filesystem(
    parent: pulumi.Resource,
    spec: ClusterSpec,
    resource_group: pulumi.Input[str],
    location: str,
    zone: str | None,
    subnet: azure.network.Subnet | None,
    tags: dict[str, str],
) -> ClusterFilesystem:
    fs = spec.filesystem
    if not isinstance(fs, AzureLustreFilesystem) or subnet is None:
        return ClusterFilesystem({"kind": "none"}, None)
    hsm = None
    repository = fs.data_repository
    if repository is not None:
        containers = f"{repository.storage_account_id}/blobServices/default/containers"
        hsm = azure.storagecache.AmlFilesystemHsmArgs(
            settings=azure.storagecache.AmlFilesystemHsmSettingsArgs(
                container=f"{containers}/{repository.container}",
                logging_container=f"{containers}/{repository.logging_container}",
            )
        )
    amlfs = azure.storagecache.AmlFilesystem(
        amlfs_name(spec.name),
        aml_filesystem_name=amlfs_name(spec.name),
        resource_group_name=resource_group,
        location=location,
        zones=[zone] if zone else None,
        sku=azure.storagecache.SkuNameArgs(name=fs.sku),
        storage_capacity_ti_b=float(fs.size_tib),
        filesystem_subnet=subnet.id,
        maintenance_window=azure.storagecache.AmlFilesystemMaintenanceWindowArgs(
            day_of_week=azure.storagecache.MaintenanceDayOfWeekType.SUNDAY, time_of_day_utc=MAINTENANCE_TIME
        ),
        hsm=hsm,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    mgs = amlfs.client_info.apply(lambda info: info.mgs_address)
    output = {
        "kind": fs.kind,
        "mount_point": fs.mount_point,
        "mount_source": pulumi.Output.concat(mgs, f"@tcp:/{FILESYSTEM_NAME}"),
        "sku": fs.sku,
        "size_tib": fs.size_tib,
    }
    return ClusterFilesystem(output, amlfs)
