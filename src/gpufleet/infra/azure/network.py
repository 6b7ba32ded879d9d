"""The cluster's network on Azure: one virtual network cut into subnets, a network security group with no
open ingress, NAT for egress and Azure Bastion as the only way in.

Creates (every name starts with the cluster's, all in the cluster's resource group):
- ``<name>-vnet``: the virtual network over ``provider.address_space`` (its subnets are resources of their
  own, so the network ignores changes to its ``subnets`` list: azure-native would otherwise remove them);
- ``<name>-nsg``: the network security group of the nodes' and Lustre's subnets. Rules: SSH in from the
  Bastion subnet only; everything else keeps Azure's default rules (traffic inside the virtual network
  allowed, ``DenyAllInBound`` for the rest), plus an explicit deny of inbound traffic from the
  ``Internet`` service tag, so no rule opens ingress from outside the network;
- ``<name>-nat-ip`` and ``<name>-nat``: a Standard static public IP and a NAT gateway on the nodes' and
  Lustre's subnets. New virtual networks get no default outbound access (Azure retired it for them,
  ``DEFAULT_OUTBOUND_DOC``), and the nodes have no public IP, so package downloads go through the NAT;
- ``<name>-nodes``: the nodes' subnet (the first quarter of the address space);
- ``<name>-lustre``: Azure Managed Lustre's subnet, a /24 (only with ``filesystem.kind: azure_lustre``);
- ``AzureBastionSubnet`` (the name Azure requires) as a /26, ``<name>-bastion-ip`` (Standard, static) and
  ``<name>-bastion``: Azure Bastion, Standard SKU with native-client tunneling and IP-based connections.

Why Bastion rather than a jump through the head: the head would need a public IP and an SSH rule open to
``access.allowed_cidrs``, and a CI runner's address is not known in advance (AWS and GCP reach nodes
through SSM and IAP for the same reason). Bastion authenticates with Microsoft Entra ID (the same
credentials as the deployment), reaches every node at its private IP (``az network bastion tunnel
--target-ip-address``, Standard SKU, ``BASTION_DOC``), and no VM gets a public IP or an open port. It
costs an hourly fee while the cluster lives (docs/azure.md).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure

DEFAULT_OUTBOUND_DOC = (
    "https://raw.githubusercontent.com/MicrosoftDocs/azure-docs/76cb79f7ce67946149da36b069ebec8e87325d95/"
    "articles/virtual-network/ip-services/default-outbound-access.md"
)
BASTION_DOC = "https://learn.microsoft.com/en-us/azure/bastion/connect-ip-address"
BASTION_SUBNET = "AzureBastionSubnet"  # Azure accepts a Bastion only in a subnet of this name
BASTION_PREFIX = 26  # "/26 or larger" (Azure Bastion configuration settings)
LUSTRE_PREFIX = 24  # AmlFilesystem.filesystem_subnet: "at least a /24 subnet mask"
SSH_PORT = "22"


@dataclass(frozen=True)
class Layout:
    """The subnets cut from the address space: nodes (the first quarter), Lustre (a /24 at the start of
    the second quarter), Bastion (a /26 at the start of the third)."""

    nodes: str
    lustre: str
    bastion: str


def layout(address_space: ipaddress.IPv4Network) -> Layout:
    quarters = list(address_space.subnets(prefixlen_diff=2))
    lustre = next(quarters[1].subnets(new_prefix=LUSTRE_PREFIX))
    bastion = next(quarters[2].subnets(new_prefix=BASTION_PREFIX))
    return Layout(nodes=str(quarters[0]), lustre=str(lustre), bastion=str(bastion))


@dataclass
class ClusterNetwork:
    vnet: azure.network.VirtualNetwork
    nsg: azure.network.NetworkSecurityGroup
    nat: azure.network.NatGateway
    nodes: azure.network.Subnet
    lustre: azure.network.Subnet | None
    bastion: azure.network.BastionHost
    layout: Layout


def build_network(
    parent: pulumi.Resource,
    name: str,
    group: pulumi.Input[str],
    location: str,
    address_space: ipaddress.IPv4Network,
    tags: dict[str, str],
    *,
    lustre: bool,
) -> ClusterNetwork:
    """The virtual network, its subnets, the NSG, NAT and Bastion of one cluster."""
    opts = pulumi.ResourceOptions(parent=parent)
    cut = layout(address_space)
    vnet = azure.network.VirtualNetwork(
        f"{name}-vnet",
        virtual_network_name=f"{name}-vnet",
        resource_group_name=group,
        location=location,
        address_space={"address_prefixes": [str(address_space)]},
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["subnets"]),
    )
    nsg = azure.network.NetworkSecurityGroup(
        f"{name}-nsg",
        network_security_group_name=f"{name}-nsg",
        resource_group_name=group,
        location=location,
        security_rules=[
            {
                "name": "ssh-from-bastion",
                "priority": 100,
                "direction": "Inbound",
                "access": "Allow",
                "protocol": "Tcp",
                "source_address_prefix": cut.bastion,
                "source_port_range": "*",
                "destination_address_prefix": "VirtualNetwork",
                "destination_port_range": SSH_PORT,
                "description": "SSH through Azure Bastion only",
            },
            {
                "name": "deny-internet-inbound",
                "priority": 4000,
                "direction": "Inbound",
                "access": "Deny",
                "protocol": "*",
                "source_address_prefix": "Internet",
                "source_port_range": "*",
                "destination_address_prefix": "*",
                "destination_port_range": "*",
                "description": "nothing from outside the virtual network",
            },
        ],
        tags=tags,
        opts=opts,
    )

    def public_ip(role: str) -> azure.network.PublicIPAddress:
        """A Standard, static IPv4 address (what a NAT gateway and Bastion take)."""
        return azure.network.PublicIPAddress(
            f"{name}-{role}",
            public_ip_address_name=f"{name}-{role}",
            resource_group_name=group,
            location=location,
            sku={"name": "Standard", "tier": "Regional"},
            public_ip_allocation_method="Static",
            public_ip_address_version="IPv4",
            tags=tags,
            opts=opts,
        )

    nat_ip = public_ip("nat-ip")
    nat = azure.network.NatGateway(
        f"{name}-nat",
        nat_gateway_name=f"{name}-nat",
        resource_group_name=group,
        location=location,
        sku={"name": "Standard"},
        public_ip_addresses=[{"id": nat_ip.id}],
        idle_timeout_in_minutes=10,
        tags=tags,
        opts=opts,
    )

    def subnet(role: str, subnet_name: str, prefix: str, private: bool) -> azure.network.Subnet:
        return azure.network.Subnet(
            f"{name}-{role}",
            subnet_name=subnet_name,
            resource_group_name=group,
            virtual_network_name=vnet.name,
            address_prefix=prefix,
            network_security_group={"id": nsg.id} if private else None,
            nat_gateway={"id": nat.id} if private else None,
            # No default outbound access: egress only through the NAT gateway.
            default_outbound_access=False if private else None,
            opts=opts,
        )

    nodes = subnet("nodes", f"{name}-nodes", cut.nodes, private=True)
    lustre_subnet = subnet("lustre", f"{name}-lustre", cut.lustre, private=True) if lustre else None
    bastion_subnet = subnet("bastion-subnet", BASTION_SUBNET, cut.bastion, private=False)
    bastion_ip = public_ip("bastion-ip")
    bastion = azure.network.BastionHost(
        f"{name}-bastion",
        bastion_host_name=f"{name}-bastion",
        resource_group_name=group,
        location=location,
        sku={"name": "Standard"},
        enable_tunneling=True,
        enable_ip_connect=True,
        ip_configurations=[
            {
                "name": "bastion",
                "subnet": {"id": bastion_subnet.id},
                "public_ip_address": {"id": bastion_ip.id},
                "private_ip_allocation_method": "Dynamic",
            }
        ],
        tags=tags,
        opts=opts,
    )
    return ClusterNetwork(
        vnet=vnet, nsg=nsg, nat=nat, nodes=nodes, lustre=lustre_subnet, bastion=bastion, layout=cut
    )
