"""``ImageBuilderAws``: the short-lived stack that bakes an AMI of the roles (``gpufleet image build``).

Type token ``gpufleet:aws:ImageBuilder``. Children (named after the builder, ``bake-<hash>``):
- ``<name>-provider``: an AWS provider in the spec's region whose default tags make the builder a
  gpufleet cluster of its own (``gpufleet:cluster=bake-<hash>``, an expiry a few hours out), so a bake
  that died half-way is found by ``gpufleet down``'s leftover check and by ``gpufleet reap``;
- unless the spec names a subnet: ``<name>-vpc``, ``<name>-public`` (one public subnet in the spec's
  zone), ``<name>-igw``, ``<name>-public-rt`` and its association. No NAT gateway: the builder alone
  lives there, with a public IP, for the minutes of a bake;
- ``<name>-sg``: SSH (22) in from each of ``access.allowed_cidrs`` and from nowhere else; HTTPS and HTTP
  out (packages, NVIDIA's and EFA's downloads);
- ``<name>-builder``: one instance from the base image (the GPU groups' family, or ``ami.id``), IMDSv2
  required, an encrypted gp3 root volume of the smallest size among the spec's groups
  (``bake_root_gib``), the cluster key in its user data;
- with the request's ``source`` (the builder's instance id, recorded from the first update as a plain string):
  ``<name>-image``, an ``aws.ec2.AmiFromInstance`` of the builder, through ``<name>-image-provider``
  (no default tags: the AMI carries the spec's tags and its own record, ``tags.aws_image_tags``, not
  the builder's cluster and expiry), with ``retain_on_delete``: destroying the builder stack afterwards
  removes every other resource and leaves the AMI (and its snapshots) in the account.

The instance type is ``gpufleet.infra.images.builder_type``'s choice (docs/aws.md says why). Outputs:
``instance_id``, ``public_ip``, ``private_ip`` and ``image_id`` (None before the image step).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.catalog import load_catalog
from gpufleet.infra import tags
from gpufleet.infra.aws.ami import Images
from gpufleet.infra.aws.network import build_public_network
from gpufleet.infra.aws.security import internet_egress, ssh_ingress
from gpufleet.infra.images import BakeRequest
from gpufleet.infra.userdata import render_user_data
from gpufleet.spec.model import AwsProvider, ClusterSpec

TYPE_TOKEN = "gpufleet:aws:ImageBuilder"


def bake_root_gib(spec: ClusterSpec) -> int:
    """The builder's root volume: the smallest ``root_volume_gib`` of the spec's groups. The AMI's root
    snapshot takes the builder's size, and EC2 refuses a root volume smaller than its snapshot ("you must
    specify a snapshot whose size is equal to or greater", docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    instance-block-device-mapping.html, read 2026-11-24); every node boots the image, the head included,
    and a larger volume grows its file system at first boot (cloud-init growpart)."""
    return min(group.root_volume_gib for group in spec.node_groups)


class ImageBuilderAws(pulumi.ComponentResource):
    stack_outputs: dict[str, Any]

    def __init__(self, name: str, args: BakeRequest, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        spec = args.spec
        provider_spec = spec.provider
        assert isinstance(provider_spec, AwsProvider)
        self.provider = aws.Provider(
            f"{name}-provider",
            region=provider_spec.region,
            default_tags=aws.ProviderDefaultTagsArgs(tags=tags.aws_tags(spec, args.created_at)),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        vpc_id, subnet_id = _network(name, provider_spec, child)
        group = _security_group(name, spec, vpc_id, child)
        item = load_catalog().get(args.group.instance_type)
        image = Images(provider_spec.ami, pulumi.InvokeOptions(parent=self, provider=self.provider)).for_type(
            item
        )
        self.builder = aws.ec2.Instance(
            f"{name}-builder",
            ami=image.id,
            instance_type=args.instance_type,
            subnet_id=subnet_id,
            vpc_security_group_ids=[group.id],
            associate_public_ip_address=True,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=rules.IMDS_HOP_LIMIT,
                instance_metadata_tags="disabled",
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=bake_root_gib(spec),
                volume_type="gp3",
                encrypted=True,
                delete_on_termination=True,
            ),
            user_data=render_user_data(f"{name}-builder", list(args.ssh_keys)),
            tags={"Name": f"{name}-builder"},
            opts=child,
        )
        self.image: aws.ec2.AmiFromInstance | None = None
        if args.source is not None:
            self.image = _image(self, name, spec, args)
        self.stack_outputs = {
            "instance_id": self.builder.id,
            "public_ip": self.builder.public_ip,
            "private_ip": self.builder.private_ip,
            "image_id": self.image.id if self.image is not None else None,
        }
        self.register_outputs(self.stack_outputs)


def _network(
    name: str, provider: AwsProvider, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Input[str], pulumi.Input[str]]:
    """The spec's VPC and subnet, or a VPC with one public subnet (the builder needs no NAT)."""
    if provider.vpc_id is not None and provider.subnet_id is not None:
        return provider.vpc_id, provider.subnet_id
    public = build_public_network(name, provider, opts)
    return public.vpc.id, public.subnet.id


def _security_group(
    name: str, spec: ClusterSpec, vpc_id: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> aws.ec2.SecurityGroup:
    group = aws.ec2.SecurityGroup(
        f"{name}-sg",
        vpc_id=vpc_id,
        description=f"gpufleet image builder {spec.name}: SSH from access.allowed_cidrs only",
        tags={"Name": f"{name}-builder"},
        opts=opts,
    )
    ssh_ingress(f"{name}-sg", group, spec, opts)
    internet_egress(f"{name}-sg", group, "(packages and downloads)", opts)
    return group


def _image(
    parent: ImageBuilderAws, name: str, spec: ClusterSpec, args: BakeRequest
) -> aws.ec2.AmiFromInstance:
    """The AMI, from the builder's id as a plain string: no input of it follows the builder, so the
    builder's removal changes nothing the AMI was made from."""
    assert args.source is not None
    provider_spec = spec.provider
    assert isinstance(provider_spec, AwsProvider)
    untagged = aws.Provider(
        f"{name}-image-provider", region=provider_spec.region, opts=pulumi.ResourceOptions(parent=parent)
    )
    return aws.ec2.AmiFromInstance(
        f"{name}-image",
        name=f"gpufleet-baked-{args.digest[:12]}-{args.created_at.strftime('%Y%m%d%H%M')}",
        description=f"gpufleet baked image {args.digest[:12]} from {args.base}",
        source_instance_id=args.source,
        tags=tags.aws_image_tags(spec, args.digest, args.base, args.created_at),
        opts=pulumi.ResourceOptions(parent=parent, provider=untagged, retain_on_delete=True),
    )
