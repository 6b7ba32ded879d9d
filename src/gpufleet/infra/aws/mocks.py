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
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
    "aws:secretsmanager/secret:Secret": "_secret",
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
        # The public images EC2 lists (PUBLIC_AMIS); a test publishes a newer one with ``publish``.
        self.public_amis: list[PublicAmi] = list(PUBLIC_AMIS)

    # ---- MockCloud --------------------------------------------------------------------------------

    def computed(self, type_: str, name: str, inputs: Mapping[str, Any], serial: int) -> dict[str, Any]:
        if type_.startswith("pulumi:providers:"):
            return {}
        _refuse_what_ec2_refuses(type_, name, inputs)
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
            owner = (args.get("owners") or [ACCOUNT])[0]
            architecture = filters.get("architecture", ["x86_64"])[0]
        else:
            found = _public_ami(self.public_amis, args.get("owners") or [], filters)
            owner, name, architecture = found.owner, found.name, found.architecture
            image_id = fake_id("ami-", name)
        return {
            "id": image_id,
            "imageId": image_id,
            "name": name,
            "ownerId": owner,
            "architecture": architecture,
            "virtualizationType": "hvm",
            "rootDeviceName": "/dev/sda1",
            "rootDeviceType": "ebs",
            "state": "available",
        }

    def publish(self, date: str) -> None:
        """Every public image line gets a newer image dated ``date`` (YYYYMMDD): a later day's EC2."""
        for ami in list(self.public_amis):
            self.public_amis.append(PublicAmi(ami.owner, ami.name[: -len(date)] + date, ami.architecture))

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
        # EC2 lists a fleet's instances in no documented order: hand them out shuffled (seeded by the
        # fleet's name, so a run repeats) so the program cannot lean on the order (it sorts them).
        random.Random(name).shuffle(ids)
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

    def _secret(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        """Secrets Manager appends six random characters to a secret's name in its ARN (API_CreateSecret:
        "Secrets Manager ... appends a hyphen and six random characters"); the id is the ARN."""
        secret = str(inputs.get("name") or name)
        arn = self.arn("secretsmanager", f"secret:{secret}-{self._suffix(name)[:6]}")
        return {"id": arn, "arn": arn, "name": secret}

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


# The public images EC2 lists for the owners gpufleet asks for (DescribeImages with ``owners`` and a
# ``name`` filter), one image of each line its publisher names, as the publisher names it. A filter that
# matches none of them fails as the provider does, so a pattern no publisher uses cannot pass a test.
# - Canonical (owner 099720109477): "ubuntu/images/<volume>/ubuntu-<codename>-<release>-<arch>-server-
#   <serial>", 22.04 under hvm-ssd, 24.04 under hvm-ssd-gp3 (Canonical's "Find Ubuntu images on AWS",
#   https://documentation.ubuntu.com/aws/aws-how-to/instances/find-ubuntu-images/, read 2026-11-27).
# - Amazon's DLAMIs (owner alias "amazon", account 898082745236): "Deep Learning [ARM64 ]Base OSS Nvidia
#   Driver GPU AMI (Ubuntu <release>) <YYYYMMDD>", the names the DLAMI release notes head with, e.g.
#   https://docs.amazonaws.cn/dlami/latest/devguide/aws-deep-learning-ami-gpubaseossarm64-ul2404-2026-09-21.html
#   ("... (Ubuntu 24.04) 20260918") and ...-gpubaseossarm64-ul2204-2026-10-08.html ("(Ubuntu 22.04)
#   20261006"), read 2026-11-27; the x86_64 line's name is the same without "ARM64 ".
# The serials and dates below are of the named form; the mock does not claim those exact images exist.
AMAZON_ACCOUNT = "898082745236"


@dataclass(frozen=True)
class PublicAmi:
    owner: str  # the publisher's account
    name: str  # ends in the image's date or serial, YYYYMMDD: the newest is the greatest
    architecture: str


PUBLIC_AMIS: tuple[PublicAmi, ...] = (
    PublicAmi(
        rules.CANONICAL_OWNER, "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20261101", "x86_64"
    ),
    PublicAmi(
        rules.CANONICAL_OWNER, "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-arm64-server-20261101", "arm64"
    ),
    PublicAmi(
        rules.CANONICAL_OWNER, "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261101", "x86_64"
    ),
    PublicAmi(
        rules.CANONICAL_OWNER, "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-20261101", "arm64"
    ),
    PublicAmi(
        AMAZON_ACCOUNT, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261006", "x86_64"
    ),
    PublicAmi(
        AMAZON_ACCOUNT, "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261006", "arm64"
    ),
    PublicAmi(
        AMAZON_ACCOUNT, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20260918", "x86_64"
    ),
    PublicAmi(
        AMAZON_ACCOUNT, "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) 20260918", "arm64"
    ),
)
# DescribeImages' owner aliases (EC2 API reference, DescribeImages, Owner.N).
_OWNER_ALIASES = {"amazon": AMAZON_ACCOUNT}


def _public_ami(images: list[PublicAmi], owners: list[str], filters: Mapping[str, list[str]]) -> PublicAmi:
    """The newest public image an ``aws:ec2/getAmi`` with these owners and filters finds (most_recent), or
    the provider's error when none matches."""
    accounts = {_OWNER_ALIASES.get(owner, owner) for owner in owners}
    names = filters.get("name", ["*"])
    arches = filters.get("architecture", ["x86_64", "arm64"])
    found = [
        image
        for image in images
        if (not owners or image.owner in accounts)
        and image.architecture in arches
        and any(_ec2_name_match(pattern, image.name) for pattern in names)
    ]
    if found:
        return max(found, key=lambda image: image.name[-8:])
    # terraform-provider-aws's aws_ami data source (what pulumi-aws's getAmi runs) when DescribeImages
    # returns nothing: "Your query returned no results. Please change your search criteria and try again."
    raise RuntimeError(
        f"invoking aws:ec2/getAmi:getAmi: Your query returned no results. Please change your search criteria "
        f"and try again. (owners {owners}, filters {dict(filters)})"
    )


def _ec2_name_match(pattern: str, name: str) -> bool:
    """EC2's filter wildcards: ``*`` any run of characters, ``?`` exactly one; the rest is literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, flags=re.DOTALL) is not None


# What the EC2 API refuses of the inputs gpufleet sends, checked here so a test fails where ``up`` would
# (Pulumi's mocks pass any input through). Sources, read 2026-11-27:
# - tags: key 1-128 characters, value at most 256, no "aws:" prefix (EC2 User Guide, "Tag restrictions",
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_Tags.html#tag-restrictions);
# - the enums of CreatePlacementGroup (Strategy), CreateLaunchTemplate (MetadataOptions HttpTokens,
#   HttpEndpoint, InstanceMetadataTags; HttpPutResponseHopLimit 1-64; Ebs VolumeType) and CreateFleet
#   (Type), EC2 API reference; pulumi_aws.ec2.PlacementStrategy lists cluster and spread of the three.
_ENUMS: dict[str, tuple[tuple[tuple[str, ...], frozenset[str]], ...]] = {
    "aws:ec2/placementGroup:PlacementGroup": (
        (("strategy",), frozenset({"cluster", "spread", "partition"})),
    ),
    "aws:ec2/fleet:Fleet": ((("type",), frozenset({"request", "maintain", "instant"})),),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        (("metadataOptions", "httpTokens"), frozenset({"optional", "required"})),
        (("metadataOptions", "httpEndpoint"), frozenset({"enabled", "disabled"})),
        (("metadataOptions", "instanceMetadataTags"), frozenset({"enabled", "disabled"})),
    ),
}
_VOLUME_TYPES = frozenset({"standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"})


def _refuse_what_ec2_refuses(type_: str, name: str, inputs: Mapping[str, Any]) -> None:
    problems: list[str] = []
    for key, tag in dict(inputs.get("tags") or {}).items():
        if not 1 <= len(key) <= 128 or key.lower().startswith("aws:") or len(str(tag)) > 256:
            problems.append(
                f"tag {key!r}={str(tag)[:40]!r}: keys 1-128 characters not starting 'aws:', values <= 256"
            )
    for path, allowed in _ENUMS.get(type_, ()):
        value: Any = inputs
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None and value not in allowed:
            problems.append(f"{'.'.join(path)} {value!r}: one of {sorted(allowed)}")
    if type_ == "aws:ec2/launchTemplate:LaunchTemplate":
        hops = (inputs.get("metadataOptions") or {}).get("httpPutResponseHopLimit")
        if hops is not None and not 1 <= int(hops) <= 64:
            problems.append(f"metadataOptions.httpPutResponseHopLimit {hops}: 1-64")
        for mapping in inputs.get("blockDeviceMappings") or []:
            volume = (mapping.get("ebs") or {}).get("volumeType")
            if volume is not None and volume not in _VOLUME_TYPES:
                problems.append(f"ebs.volumeType {volume!r}: one of {sorted(_VOLUME_TYPES)}")
    if problems:
        raise RuntimeError(f"{type_} {name}: InvalidParameterValue: " + "; ".join(problems))
