"""The cluster's VMs on Azure: one Flexible scale set per InfiniBand domain, one VM (and NIC) per host.

Creates:
- ``<name>-<group>-ib``: per compute group, a scale set in Flexible orchestration with no VM profile, one
  fault domain and a single placement group. It is the group's InfiniBand domain: the platform links the
  InfiniBand ports of the VMs of one scale set, and only those (``catalog.azure``); its VMs are made one by
  one below and attached to it by ``virtualMachineScaleSet``, so each keeps the host name, NIC and
  cloud-config gpufleet gives it. ``provider.ib_domain_max_vms`` bounds a group (preflight refuses more);
- ``<host>-nic``: one NIC per host in the nodes' subnet, accelerated networking on, no public IP;
- ``<host>``: one VM per host, named as ``ClusterSpec.host_names`` says: the size of its group, the image
  of ``catalog.azure`` (Microsoft's Ubuntu HPC image for a GPU size unless ``provider.image`` names
  another; plain Ubuntu of the GPU nodes' release on the head and CPU groups), a Premium SSD OS disk
  (managed disks are encrypted at rest with platform-managed keys by default), password login off, the
  cluster's SSH keys for the image user and the cloud-config of ``gpufleet.infra.userdata`` as custom data.
  A VM keeps the image it was made from (``ignore_changes`` on the image reference), as on AWS and GCP.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pulumi
import pulumi_azure_native as azure

from gpufleet.catalog import InstanceType
from gpufleet.catalog.azure import ImageChoice
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.spec.model import NodeGroup

KEPT_IMAGE = ("storageProfile.imageReference",)


def scale_set(
    parent: pulumi.Resource,
    name: str,
    group: NodeGroup,
    resource_group: pulumi.Input[str],
    location: str,
    zone: str | None,
    tags: dict[str, str],
) -> azure.compute.VirtualMachineScaleSet:
    """The group's InfiniBand domain: a Flexible scale set without a VM profile."""
    return azure.compute.VirtualMachineScaleSet(
        f"{name}-{group.name}-ib",
        vm_scale_set_name=f"{name}-{group.name}-ib",
        resource_group_name=resource_group,
        location=location,
        orchestration_mode="Flexible",
        platform_fault_domain_count=1,
        single_placement_group=True,
        zones=[zone] if zone else None,
        tags={**tags, "gpufleet:group": group.name},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def image_reference(image: ImageChoice) -> azure.compute.ImageReferenceArgs:
    """An ImageReference: a marketplace URN split in its four parts, or a managed or gallery image id."""
    if image.id is not None:
        return azure.compute.ImageReferenceArgs(id=image.id)
    assert image.urn is not None
    publisher, offer, sku, version = image.urn.split(":")
    return azure.compute.ImageReferenceArgs(publisher=publisher, offer=offer, sku=sku, version=version)


def _custom_data(text: pulumi.Input[str]) -> pulumi.Output[str]:
    """customData is base64 on the wire (OSProfile.customData, 'Base64 encoded string')."""
    return pulumi.Output.from_input(text).apply(lambda value: base64.b64encode(value.encode()).decode())


def host_vm(
    parent: pulumi.Resource,
    *,
    hostname: str,
    group: NodeGroup,
    item: InstanceType | None,
    resource_group: pulumi.Input[str],
    location: str,
    zone: str | None,
    subnet_id: pulumi.Input[str],
    image: ImageChoice,
    ssh_keys: Sequence[pulumi.Input[str]],
    user_data: pulumi.Input[str],
    scale_set: azure.compute.VirtualMachineScaleSet | None,
    tags: dict[str, str],
    depends_on: list[pulumi.Resource],
) -> tuple[azure.network.NetworkInterface, azure.compute.VirtualMachine]:
    """One host: its NIC (no public IP) and its VM, attached to ``scale_set`` when it has one."""
    opts = pulumi.ResourceOptions(parent=parent)
    nic = azure.network.NetworkInterface(
        f"{hostname}-nic",
        network_interface_name=f"{hostname}-nic",
        resource_group_name=resource_group,
        location=location,
        enable_accelerated_networking=True,
        ip_configurations=[
            {
                "name": "primary",
                "primary": True,
                "subnet": {"id": subnet_id},
                "private_ip_allocation_method": "Dynamic",
            }
        ],
        tags={**tags, "gpufleet:group": group.name},
        opts=opts,
    )
    keys = [
        azure.compute.SshPublicKeyArgs(path=f"/home/{IMAGE_USER}/.ssh/authorized_keys", key_data=key)
        for key in ssh_keys
    ]
    vm = azure.compute.VirtualMachine(
        hostname,
        vm_name=hostname,
        resource_group_name=resource_group,
        location=location,
        zones=[zone] if zone else None,
        hardware_profile=azure.compute.HardwareProfileArgs(vm_size=group.instance_type),
        storage_profile=azure.compute.StorageProfileArgs(
            image_reference=image_reference(image),
            os_disk=azure.compute.OSDiskArgs(
                name=f"{hostname}-os",
                create_option="FromImage",
                caching=azure.compute.CachingTypes.READ_WRITE,
                disk_size_gb=group.root_volume_gib,
                delete_option="Delete",
                managed_disk=azure.compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
            ),
        ),
        os_profile=azure.compute.OSProfileArgs(
            computer_name=hostname,
            admin_username=IMAGE_USER,
            custom_data=_custom_data(user_data),
            linux_configuration=azure.compute.LinuxConfigurationArgs(
                disable_password_authentication=True,
                provision_vm_agent=True,
                ssh=azure.compute.SshConfigurationArgs(public_keys=keys),
            ),
        ),
        network_profile=azure.compute.NetworkProfileArgs(
            network_interfaces=[
                azure.compute.NetworkInterfaceReferenceArgs(id=nic.id, primary=True, delete_option="Delete")
            ],
        ),
        virtual_machine_scale_set=(
            azure.compute.SubResourceArgs(id=scale_set.id) if scale_set is not None else None
        ),
        tags={**tags, "gpufleet:group": group.name},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on, ignore_changes=list(KEPT_IMAGE)),
    )
    return nic, vm
