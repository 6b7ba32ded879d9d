"""``GpuClusterAzure``: a whole gpufleet cluster on Microsoft Azure, from a spec, as one Pulumi component.

Type token ``gpufleet:azure:GpuCluster``. Before registering anything it runs the preflight checks (common
and Azure) and raises ``SpecError`` listing every error. Then it creates, as its children:
- ``<name>-rg``: the cluster's resource group, ``gpufleet-<name>``, tagged ``gpufleet:cluster`` and
  ``gpufleet:expires-at`` (and the spec's tags) like everything in it: deleting it deletes the cluster,
  and the leftover check asks first whether it is gone (``leftovers.py``);
- the network of ``network.py`` (virtual network, subnets, NSG, NAT gateway, Bastion);
- the Managed Lustre file system of ``filesystem.py``, if the spec asks for one;
- per compute group a Flexible scale set, its InfiniBand domain, and per host a NIC and a VM
  (``compute.py``); the controller and other non-compute groups get VMs outside any scale set.

``stack_outputs`` holds the outputs in ``gpufleet.infra.outputs``' shape. Baked images: the nodes boot
``provider.image`` when it names one (a gpufleet-baked or a site's image), else Microsoft's; gpufleet does
not bake Azure images itself yet (docs/azure.md), so ``baked_image_hash`` is always null.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pulumi
import pulumi_azure_native as azure

from gpufleet.catalog import load_catalog
from gpufleet.catalog.azure import gpu_image, plain_image
from gpufleet.errors import SpecError
from gpufleet.infra.azure.compute import host_vm, scale_set
from gpufleet.infra.azure.filesystem import build_filesystem
from gpufleet.infra.azure.network import build_network
from gpufleet.infra.outputs import host_record
from gpufleet.infra.tags import PLAN_CLUSTER_ID, azure_tags, expires_at_text
from gpufleet.infra.userdata import user_data
from gpufleet.preflight import require_no_errors
from gpufleet.spec.model import AzureLustreFilesystem, AzureProvider, ClusterSpec, Role

TYPE_TOKEN = "gpufleet:azure:GpuCluster"


def resource_group_name(cluster: str) -> str:
    """The cluster's resource group (the leftover check looks it up by this name)."""
    return f"gpufleet-{cluster}"


@dataclass(frozen=True)
class GpuClusterAzureArgs:
    spec: ClusterSpec
    created_at: datetime
    # Public keys authorized on every node besides the spec's (gpufleet up adds the cluster's own key;
    # stacks/ the stack's key, an Output when pulumi-tls makes it).
    ssh_keys: tuple[pulumi.Input[str], ...] = ()
    # The cluster's id (gpufleet.state.new_cluster_id: made at the first up, kept in the state and the
    # stack), tagged on the resource group and every resource; the offline plan's where none exists yet.
    cluster_id: str = PLAN_CLUSTER_ID


class GpuClusterAzure(pulumi.ComponentResource):
    """A GPU cluster on Azure: resource group, network, Bastion, scale sets, VMs, Managed Lustre."""

    stack_outputs: dict[str, Any]

    def __init__(
        self, name: str, args: GpuClusterAzureArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        spec = args.spec
        provider = spec.provider
        if not isinstance(provider, AzureProvider):
            raise SpecError(f"GpuClusterAzure needs provider 'azure', not '{provider.kind}'")
        require_no_errors(spec)
        super().__init__(TYPE_TOKEN, name, None, opts)
        catalog = load_catalog()
        tags = azure_tags(spec, args.created_at, args.cluster_id)
        location, zone = provider.location, provider.zone
        child = pulumi.ResourceOptions(parent=self)

        self.resource_group = azure.resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=resource_group_name(spec.name),
            location=location,
            tags=tags,
            opts=child,
        )
        group_name = self.resource_group.name
        lustre = isinstance(spec.filesystem, AzureLustreFilesystem)
        network = build_network(self, name, group_name, location, provider.address_space, tags, lustre=lustre)
        filesystem = build_filesystem(self, spec, group_name, location, zone, network.lustre, tags)

        image = provider.image
        gpu_items = [catalog.get(g.instance_type) for g in spec.compute_groups]
        first_gpu = next((item for item in gpu_items if item is not None and item.gpu), None)
        gpu_choice = gpu_image(
            first_gpu, image.urn, image.id, image.architecture, image.generation, image.os_release
        )
        release = gpu_choice.os_release if gpu_choice is not None else None

        hosts: list[dict[str, Any]] = []
        self.scale_sets: dict[str, azure.compute.VirtualMachineScaleSet] = {}
        self.vms: dict[str, azure.compute.VirtualMachine] = {}
        self.nics: dict[str, azure.network.NetworkInterface] = {}
        for group in spec.node_groups:
            item = catalog.get(group.instance_type)
            gpu = item is not None and item.gpu is not None
            choice = gpu_choice if gpu else plain_image(release, item)
            assert choice is not None, "preflight azure_image refuses a GPU group without an image"
            ib_domain = None
            if Role.COMPUTE in group.roles:
                ib_domain = scale_set(self, name, group, group_name, location, zone, tags)
                self.scale_sets[group.name] = ib_domain
            interfaces = item.fabric.interfaces if item is not None and Role.COMPUTE in group.roles else 0
            for hostname in spec.host_names(group):
                nic, vm = host_vm(
                    self,
                    hostname=hostname,
                    group=group,
                    item=item,
                    resource_group=group_name,
                    location=location,
                    zone=zone,
                    subnet_id=network.nodes.id,
                    image=choice,
                    ssh_keys=_keys(spec, args.ssh_keys),
                    user_data=user_data(spec, hostname, args.ssh_keys),
                    scale_set=ib_domain,
                    tags=tags,
                    depends_on=[network.nat],
                )
                self.nics[hostname], self.vms[hostname] = nic, vm
                hosts.append(
                    host_record(
                        name=hostname,
                        roles=group.roles,
                        private_ip=nic.ip_configurations.apply(_private_ip),
                        instance_type=group.instance_type,
                        item=item,
                        fabric_interfaces=interfaces,
                        image=choice.manifest,
                    )
                )

        self.network = network
        self.filesystem = filesystem.resource
        self.stack_outputs = {
            "cluster": spec.name,
            "cluster_id": args.cluster_id,
            "provider": "azure",
            "region": location,
            "zone": zone,
            "fabric": spec.fabric.kind.value,
            "expires_at": expires_at_text(spec, args.created_at),
            "head_node": spec.host_names(spec.controller_group)[0],
            "hosts": hosts,
            "filesystem": filesystem.output,
            "baked_image_hash": None,
            # Its nodes do not configure themselves yet: no read of the munge key at boot
            # (docs/boot-configure.md).
            "boot_configure": False,
        }
        self.register_outputs(self.stack_outputs)


def _keys(spec: ClusterSpec, extra: tuple[pulumi.Input[str], ...]) -> list[pulumi.Input[str]]:
    """The keys of the VMs' ``ssh.publicKeys``: the spec's and the caller's (the cluster's own)."""
    keys: list[pulumi.Input[str]] = [spec.access.ssh_public_key] if spec.access.ssh_public_key else []
    return [*keys, *extra]


def _private_ip(configurations: Any) -> str:
    """The NIC's primary private IP (``ipConfigurations[].privateIPAddress``)."""
    for configuration in configurations or []:
        if configuration.primary in (True, None):
            return str(configuration.private_ip_address)
    raise ValueError("the NIC has no IP configuration")
