"""``AwsMockCloud``: what the AWS provider would compute, for ``gpufleet plan`` and the tests.

Implements ``gpufleet.infra.plan.MockCloud``: realistic ids (``i-``, ``lt-``, ``sg-``, ``fs-``, ...), ARNs
in the spec's region, private IPs from the private subnet in the spec's host order (after the addresses AWS
keeps), FSx ``dns_name`` and ``mount_name``, and the answers to the provider functions the program
calls: ``aws:ec2/getAmi``, ``aws:ec2/getInstance``, ``aws:ec2/getInstances`` (none for a host in
``lost_hosts``), ``aws:ec2/getSubnet`` (``subnets``) and ``aws:ec2/getAmiIds`` (the baked AMIs a test puts
in ``baked_images``; none by default). An instant EC2 Fleet launches
``totalTargetCapacity`` instances (``fleetInstanceSets``); their ids sort in the group's host order, so
``getInstance`` answers each with its host's address. Creates nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any

from gpufleet.catalog import aws as rules
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import fake_id
from gpufleet.infra.tags import AWS_IMAGE_BASE_TAG, AWS_IMAGE_HASH_TAG
from gpufleet.spec.model import AwsProvider, ClusterSpec

ACCOUNT = "123456789012"

# type token -> (id prefix, ARN resource path or None)
_IDS: dict[str, tuple[str, str | None]] = {
    "aws:ec2/vpc:Vpc": ("vpc-", "vpc"),
    "aws:ec2/subnet:Subnet": ("subnet-", "subnet"),
    "aws:ec2/internetGateway:InternetGateway": ("igw-", "internet-gateway"),
    "aws:ec2/eip:Eip": ("eipalloc-", "elastic-ip"),
    "aws:ec2/natGateway:NatGateway": ("nat-", "natgateway"),
    "aws:ec2/routeTable:RouteTable": ("rtb-", "route-table"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": ("rtbassoc-", None),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("vpce-", "vpc-endpoint"),
    "aws:ec2/securityGroup:SecurityGroup": ("sg-", "security-group"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("sgr-", "security-group-rule"),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ("sgr-", "security-group-rule"),
    "aws:ec2/placementGroup:PlacementGroup": ("pg-", "placement-group"),
    "aws:ec2/launchTemplate:LaunchTemplate": ("lt-", "launch-template"),
    "aws:ec2/instance:Instance": ("i-", "instance"),
    "aws:ec2/amiFromInstance:AmiFromInstance": ("ami-", "image"),
    "aws:ec2/fleet:Fleet": ("fleet-", "fleet"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("fs-", "file-system"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("dra-", "association"),
}

# type token -> the method that adds the type's own computed fields
_EXTRAS = {
    "aws:ec2/vpc:Vpc": "_vpc",
    "aws:ec2/subnet:Subnet": "_subnet",
    "aws:ec2/eip:Eip": "_eip",
    "aws:ec2/natGateway:NatGateway": "_nat_gateway",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "_vpc_endpoint",
    "aws:ec2/securityGroup:SecurityGroup": "_security_group",
    "aws:ec2/placementGroup:PlacementGroup": "_placement_group",
    "aws:iam/role:Role": "_role",
    "aws:iam/instanceProfile:InstanceProfile": "_instance_profile",
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": "_role_policy_attachment",
    "aws:ec2/launchTemplate:LaunchTemplate": "_launch_template",
    "aws:ec2/instance:Instance": "_instance",
    "aws:ec2/fleet:Fleet": "_fleet",
    "aws:ec2/tag:Tag": "_tag",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "_lustre_file_system",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "_data_repository_association",
}


class AwsMockCloud:
    def __init__(self, spec: ClusterSpec) -> None:
        provider = spec.provider
        if not isinstance(provider, AwsProvider):
            raise TypeError("AwsMockCloud needs an aws spec")
        self.region = provider.region
        self.zone = provider.zone
        self.partition = rules.partition(provider.region)
        # Each host of the spec gets the next free address in spec order, whatever order Pulumi
        # registers the instances in (so plans and snapshots are stable).
        self._addresses = ipaddress.IPv4Network(rules.PRIVATE_SUBNET_CIDR).hosts()
        for _ in range(3):  # .1-.3 are the router, DNS and AWS's spare; .0 is not a host
            next(self._addresses)
        hosts = [host for group in spec.node_groups for host in spec.host_names(group)]
        self._address_of = {host: str(next(self._addresses)) for host in hosts}
        self._cluster = spec.name
        self._hosts_of = {group.name: spec.host_names(group) for group in spec.node_groups}
        # instance id -> host, for the instances a fleet launched (answered by aws:ec2/getInstance)
        self._fleet_host: dict[str, str] = {}
        # Fleet hosts whose instance is gone (a spot interruption, a manual termination): getInstances
        # finds no running instance for them, as EC2 answers a filter that matches nothing.
        self.lost_hosts: set[str] = set()
        # The account's existing subnets (aws:ec2/getSubnet): by default the spec's subnet lies in its
        # zone and VPC; a test puts another one here.
        self.subnets: dict[str, dict[str, str]] = {}
        if provider.subnet_id is not None:
            self.subnets[provider.subnet_id] = {
                "availabilityZone": provider.zone,
                "vpcId": provider.vpc_id or "",
            }
        # The account's baked AMIs (gpufleet image build), for aws:ec2/getAmiIds and getAmi.
        self.baked_images: list[CloudImage] = []

    # ---- MockCloud --------------------------------------------------------------------------------

    def computed(self, type_: str, name: str, inputs: Mapping[str, Any], serial: int) -> dict[str, Any]:
        if type_.startswith("pulumi:providers:"):
            return {}
        prefix, arn_kind = _IDS.get(type_, ("id-", None))
        service = type_.split(":")[1].split("/")[0]
        if service == "vpc":
            service = "ec2"
        resource_id = fake_id(prefix, name)
        state: dict[str, Any] = {"id": resource_id}
        if arn_kind is not None:
            state["arn"] = self.arn(service, f"{arn_kind}/{resource_id}")
        if "tags" in inputs:
            state["tagsAll"] = dict(inputs["tags"] or {})
        extra = _EXTRAS.get(type_)
        if extra is not None:
            state.update(getattr(self, extra)(name, inputs, resource_id))
        return state

    def invoke(self, token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if token == "aws:ec2/getAmi:getAmi":
            return self._ami(args)
        if token == "aws:ec2/getInstance:getInstance":
            return self._get_instance(args)
        if token == "aws:ec2/getInstances:getInstances":
            return self._get_instances(args)
        if token == "aws:ec2/getSubnet:getSubnet":
            subnet = args.get("id") or ""
            if subnet not in self.subnets:
                # The aws_subnet data source fails when nothing matches (terraform-provider-aws
                # tfresource.SingularDataSourceFindError: "no matching EC2 Subnet found").
                raise RuntimeError(f"reading EC2 Subnet ({subnet}): no matching EC2 Subnet found")
            return {"id": subnet, "cidrBlock": rules.PRIVATE_SUBNET_CIDR, **self.subnets[subnet]}
        if token == "aws:ec2/getAmiIds:getAmiIds":
            return self._ami_ids(args)
        raise NotImplementedError(f"AwsMockCloud has no answer for the provider function {token}")

    # ---- helpers ----------------------------------------------------------------------------------

    def arn(self, service: str, resource: str, *, region: bool = True) -> str:
        return f"arn:{self.partition}:{service}:{self.region if region else ''}:{ACCOUNT}:{resource}"

    @staticmethod
    def _suffix(name: str) -> str:
        return hashlib.sha256(name.encode()).hexdigest()[:7]

    def _ami_ids(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The baked AMIs whose tags match every ``tag:`` filter, newest first (EC2's default order)."""
        filters = {f["name"]: f["values"] for f in args.get("filters") or []}
        wanted = filters.get(f"tag:{AWS_IMAGE_HASH_TAG}")
        found = [image for image in self.baked_images if wanted is None or image.digest in wanted]
        found.sort(key=lambda image: image.created, reverse=not args.get("sortAscending"))
        return {"id": self.region, "ids": [image.id for image in found]}

    def _ami(self, args: Mapping[str, Any]) -> dict[str, Any]:
        filters = {f["name"]: f["values"] for f in args.get("filters") or []}
        baked = next((i for i in self.baked_images if i.id in filters.get("image-id", [])), None)
        if baked is not None:
            return {
                "id": baked.id,
                "imageId": baked.id,
                "name": baked.name,
                "ownerId": ACCOUNT,
                "creationDate": baked.created,
                "tags": {AWS_IMAGE_HASH_TAG: baked.digest, AWS_IMAGE_BASE_TAG: baked.base},
                "architecture": "x86_64",
                "rootDeviceName": "/dev/sda1",
                "state": "available",
            }
        if "image-id" in filters:
            image_id = filters["image-id"][0]
            name = f"pinned image {image_id}"
        else:
            name = filters.get("name", ["image-*"])[0].replace("*", "20261101").strip()
            image_id = fake_id("ami-", name)
        owner = (args.get("owners") or [ACCOUNT])[0]
        return {
            "id": image_id,
            "imageId": image_id,
            "name": name,
            "ownerId": "898082745236" if owner == "amazon" else owner,
            "architecture": filters.get("architecture", ["x86_64"])[0],
            "virtualizationType": "hvm",
            "rootDeviceName": "/dev/sda1",
            "rootDeviceType": "ebs",
            "state": "available",
        }

    # Per-type extras (see _EXTRAS).

    def _vpc(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"defaultSecurityGroupId": fake_id("sg-", name + "/default"), "ownerId": ACCOUNT}

    def _subnet(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"availabilityZoneId": f"{self.region[:3]}{self.region[-1]}-az1"}

    def _eip(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        last = int(self._suffix(name), 16) % 254 + 1
        return {"allocationId": rid, "publicIp": f"203.0.113.{last}"}

    def _nat_gateway(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"privateIp": "10.0.128.4", "networkInterfaceId": fake_id("eni-", name)}

    def _vpc_endpoint(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"prefixListId": fake_id("pl-", name, 8), "state": "available"}

    def _security_group(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"name": f"{name}-{self._suffix(name)}", "ownerId": ACCOUNT}

    def _placement_group(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        group_name = inputs.get("name") or f"{name}-{self._suffix(name)}"
        return {
            "id": group_name,
            "name": group_name,
            "placementGroupId": rid,
            "arn": self.arn("ec2", f"placement-group/{group_name}"),
        }

    def _role(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        role_name = f"{name}-{self._suffix(name)}"
        path = inputs.get("path") or "/"
        return {
            "id": role_name,
            "name": role_name,
            "uniqueId": fake_id("AROA", name, 17).upper(),
            "arn": self.arn("iam", f"role{path}{role_name}", region=False),
        }

    def _instance_profile(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        profile_name = f"{name}-{self._suffix(name)}"
        path = inputs.get("path") or "/"
        return {
            "id": profile_name,
            "name": profile_name,
            "arn": self.arn("iam", f"instance-profile{path}{profile_name}", region=False),
        }

    def _role_policy_attachment(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"id": f"{inputs.get('role')}-{self._suffix(name)}"}

    def _launch_template(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"latestVersion": 1, "defaultVersion": 1, "name": f"{name}-{self._suffix(name)}"}

    def _instance(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        address = self._address_of.get(name) or str(next(self._addresses))
        dns = f"ip-{address.replace('.', '-')}.{self.region}.compute.internal"
        return {
            "privateIp": address,
            "privateDns": dns,
            "primaryNetworkInterfaceId": fake_id("eni-", name),
            "availabilityZone": self.zone,
            "instanceState": "running",
            # The image builder alone asks for one (gpufleet.infra.aws.image_builder).
            "publicIp": "198.51.100.10" if inputs.get("associatePublicIpAddress") else "",
        }

    def _fleet(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        spec = inputs.get("targetCapacitySpecification") or {}
        count = int(spec.get("totalTargetCapacity") or 0)
        group = name.removeprefix(f"{self._cluster}-").removesuffix("-fleet")
        hosts = self._hosts_of.get(group, [f"{name}-{i}" for i in range(count)])
        ids = sorted(fake_id("i-", f"{name}/{i}") for i in range(count))
        self._fleet_host.update(zip(ids, hosts, strict=False))
        override = ((inputs.get("launchTemplateConfigs") or [{}])[0].get("overrides") or [{}])[0]
        lifecycle = "spot" if spec.get("defaultTargetCapacityType") == "spot" else "on-demand"
        return {
            "fleetInstanceSets": [
                {"instanceIds": ids, "instanceType": override.get("instanceType"), "lifecycle": lifecycle}
            ],
            "fleetState": "active",
            "fulfilledCapacity": float(count),
            "fulfilledOnDemandCapacity": float(count if lifecycle == "on-demand" else 0),
        }

    def _tag(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"id": f"{inputs.get('resourceId')},{inputs.get('key')}"}

    def _get_instance(self, args: Mapping[str, Any]) -> dict[str, Any]:
        instance_id = args.get("instanceId") or ""
        host = self._fleet_host.get(instance_id, instance_id)
        if host in self.lost_hosts:
            # The aws_instance data source fails when nothing matches (terraform-provider-aws
            # tfresource.SingularDataSourceFindError: "no matching EC2 Instance found").
            raise RuntimeError("reading EC2 Instance: no matching EC2 Instance found")
        return {"id": instance_id, **self._instance(host, {}, instance_id), "instanceType": ""}

    def _get_instances(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """aws_instances filtered on ``instance-id`` (and the default ``running`` state): the running
        ones among the ids, each with its host's address; a lost host's id matches nothing."""
        wanted = [v for f in args.get("filters") or [] if f.get("name") == "instance-id" for v in f["values"]]
        ids = [i for i in wanted if self._fleet_host.get(i, i) not in self.lost_hosts]
        ips = [self._instance(self._fleet_host.get(i, i), {}, i)["privateIp"] for i in ids]
        return {"id": self.region, "ids": ids, "privateIps": ips, "publicIps": [], "ipv6Addresses": []}

    def _lustre_file_system(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        # A real mount name is eight lower-case letters and digits (SCRATCH_1 mounts "fsx").
        digest = hashlib.sha256(f"{name}/mount".encode()).hexdigest()
        mount = "fsx" if inputs.get("deploymentType") == "SCRATCH_1" else digest[:8]
        return {
            "dnsName": f"{rid}.fsx.{self.region}.amazonaws.com",
            "mountName": mount,
            "networkInterfaceIds": [fake_id("eni-", name + "/fsx")],
            "ownerId": ACCOUNT,
        }

    def _data_repository_association(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        return {"associationId": rid}
