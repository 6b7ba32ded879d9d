"""The cluster's network: one private subnet in the spec's single zone (EFA does not cross zones).

Creates, unless the spec names an existing VPC and subnet (then nothing, as ParallelCluster's
``HeadNode/Networking/SubnetId`` and ``SlurmQueues/Networking/SubnetIds`` place a cluster in a subnet of the
user's; the subnet is read with ``aws.ec2.get_subnet`` and refused, before any node is made, unless it is
in the spec's zone and VPC: EFA does not cross zones, and a fleet launches into that subnet):
- ``<name>-vpc``: the VPC (DNS support and host names on)
- ``<name>-private``: the nodes' and the file system's subnet, no public IPs
- ``<name>-public``, ``<name>-igw``, ``<name>-nat-eip``, ``<name>-nat``: a small public subnet whose only
  tenant is the NAT gateway that lets the nodes reach package mirrors
- ``<name>-public-rt`` / ``<name>-private-rt`` and their associations: default routes to the internet
  gateway and to the NAT gateway
- ``<name>-s3``: an S3 gateway endpoint on the private route table (S3 traffic, e.g. the FSx data
  repository and package caches, stays off the NAT)
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.spec.model import AwsProvider


@dataclass(frozen=True)
class Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    created: bool


@dataclass(frozen=True)
class PublicNetwork:
    vpc: aws.ec2.Vpc
    subnet: aws.ec2.Subnet
    igw: aws.ec2.InternetGateway


def s3_service_name(region: str) -> str:
    prefix = "cn.com.amazonaws" if rules.partition(region) == "aws-cn" else "com.amazonaws"
    return f"{prefix}.{region}.s3"


def build_public_network(name: str, provider: AwsProvider, opts: pulumi.ResourceOptions) -> PublicNetwork:
    """A VPC with one public subnet routed to an internet gateway (the image builder's whole network, and
    the part of the cluster's that holds its NAT gateway)."""
    vpc = aws.ec2.Vpc(
        f"{name}-vpc",
        cidr_block=rules.VPC_CIDR,
        enable_dns_support=True,
        enable_dns_hostnames=True,
        tags={"Name": name},
        opts=opts,
    )
    public = aws.ec2.Subnet(
        f"{name}-public",
        vpc_id=vpc.id,
        cidr_block=rules.PUBLIC_SUBNET_CIDR,
        availability_zone=provider.zone,
        map_public_ip_on_launch=False,
        tags={"Name": f"{name}-public"},
        opts=opts,
    )
    igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={"Name": name}, opts=opts)
    public_rt = aws.ec2.RouteTable(
        f"{name}-public-rt",
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
        tags={"Name": f"{name}-public"},
        opts=opts,
    )
    aws.ec2.RouteTableAssociation(
        f"{name}-public-rta", subnet_id=public.id, route_table_id=public_rt.id, opts=opts
    )
    return PublicNetwork(vpc=vpc, subnet=public, igw=igw)


def checked_subnet(provider: AwsProvider, zone: str, vpc_id: str) -> str:
    """The spec's existing subnet, or an error naming what does not match (its zone, its VPC)."""
    wrong = []
    if zone != provider.zone:
        wrong.append(f"it is in {zone}, not provider.zone {provider.zone} (EFA does not cross zones)")
    if vpc_id != provider.vpc_id:
        wrong.append(f"it belongs to {vpc_id}, not provider.vpc_id {provider.vpc_id}")
    if wrong:
        raise ValueError(
            f"provider.subnet_id {provider.subnet_id}: {'; '.join(wrong)}. Name a subnet of "
            f"{provider.vpc_id} in {provider.zone}, or set provider.zone to the subnet's zone, or drop "
            "vpc_id and subnet_id to let gpufleet make the network"
        )
    return str(provider.subnet_id)


def build_network(name: str, provider: AwsProvider, opts: pulumi.ResourceOptions) -> Network:
    if provider.vpc_id is not None and provider.subnet_id is not None:
        found = aws.ec2.get_subnet_output(
            id=provider.subnet_id, opts=pulumi.InvokeOptions(parent=opts.parent, provider=opts.provider)
        )
        subnet = pulumi.Output.all(found.availability_zone, found.vpc_id).apply(
            lambda got: checked_subnet(provider, got[0], got[1])
        )
        return Network(vpc_id=provider.vpc_id, subnet_id=subnet, created=False)

    public = build_public_network(name, provider, opts)
    vpc = public.vpc
    private = aws.ec2.Subnet(
        f"{name}-private",
        vpc_id=vpc.id,
        cidr_block=rules.PRIVATE_SUBNET_CIDR,
        availability_zone=provider.zone,
        map_public_ip_on_launch=False,
        tags={"Name": f"{name}-private"},
        opts=opts,
    )
    eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={"Name": f"{name}-nat"}, opts=opts)
    nat = aws.ec2.NatGateway(
        f"{name}-nat",
        allocation_id=eip.allocation_id,
        subnet_id=public.subnet.id,
        connectivity_type="public",
        tags={"Name": name},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[public.igw])),
    )
    private_rt = aws.ec2.RouteTable(
        f"{name}-private-rt",
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
        tags={"Name": f"{name}-private"},
        opts=opts,
    )
    aws.ec2.RouteTableAssociation(
        f"{name}-private-rta", subnet_id=private.id, route_table_id=private_rt.id, opts=opts
    )
    aws.ec2.VpcEndpoint(
        f"{name}-s3",
        vpc_id=vpc.id,
        service_name=s3_service_name(provider.region),
        vpc_endpoint_type="Gateway",
        route_table_ids=[private_rt.id],
        tags={"Name": f"{name}-s3"},
        opts=opts,
    )
    return Network(vpc_id=vpc.id, subnet_id=private.id, created=True)
