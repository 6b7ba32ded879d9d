"""One launch template per node group: image, size, interfaces, metadata, disk, capacity, placement.

Creates ``<name>-<group>-lt`` for each node group, with:
- the image found by ``ami.py`` and the group's instance type;
- IMDSv2 required (``http_tokens: required``) with a hop limit of 2, as AWS recommends when containers
  on the node call the metadata service (``rules.IMDS_DOC``);
- an encrypted gp3 root volume of the group's ``root_volume_gib`` (the account's default EBS key);
- the network interfaces of ``interfaces.group_layout``: ENA primary, then EFA or EFA-only interfaces
  on every network card for EFA compute groups; no public IP on any of them;
- the instance profile, the capacity mode's market and reservation arguments, and the cluster placement
  group where ``rules.wants_cluster_placement_group`` allows one;
- tag specifications for the volumes and interfaces EC2 creates at launch (and spot requests), which
  the provider's default tags do not reach; a compute group's template (launched by ``fleet.py``) also
  tags its instances, which the fleet launches and the provider's tags do not reach either, and carries
  the group's user data (one for every node of the group: Ansible sets each host name). These tags are
  the cluster's name, id and the spec's tags, not its expiry (``launch_tags``): they stay the first up's
  for the resource's life, and a stale expiry there once made the reaper destroy a cluster whose ttl had
  been raised (AWS audit 2026-11-27 H1). A fleet instance gets its expiry from its own ``aws.ec2.Tag``.

Instances follow the template's latest version, and a new version replaces them. So nothing that changes
on its own may reach the template after the first ``pulumi up`` (``KEPT``): an image found by family is
resolved once and kept in the stack's state (a newer DLAMI release does not roll a live cluster; pin
``ami.id`` to move to another image), and the launch tag specifications keep the tags of the first up (an
edited ``lifetime.ttl`` or ``tags`` reaches the instances in place through the provider's default tags,
not the template).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.catalog.aws_interfaces import InterfaceSlot
from gpufleet.infra.aws import capacity
from gpufleet.infra.aws.ami import Image
from gpufleet.infra.tags import AWS_EXPIRES_TAG
from gpufleet.spec.model import NodeGroup

LAUNCH_TAGGED = ("volume", "network-interface")
# Template inputs kept from the first 'pulumi up' (see the module doc); "imageId" only for a family lookup.
KEPT = ("tagSpecifications",)
KEPT_FAMILY_IMAGE = ("imageId",)


def launch_tags(cluster_tags: dict[str, str]) -> dict[str, str]:
    """The tags EC2 writes at launch: the cluster's, less the expiry (see the module doc)."""
    return {key: value for key, value in cluster_tags.items() if key != AWS_EXPIRES_TAG}


def network_interface_args(
    slot: InterfaceSlot, subnet_id: pulumi.Input[str], security_group_ids: Sequence[pulumi.Input[str]]
) -> aws.ec2.LaunchTemplateNetworkInterfaceArgs:
    primary = slot.network_card_index == 0 and slot.device_index == 0
    return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        network_card_index=slot.network_card_index,
        device_index=slot.device_index,
        interface_type=slot.interface_type,
        subnet_id=subnet_id,
        security_groups=security_group_ids,
        delete_on_termination="true",
        associate_public_ip_address="false" if primary else None,
    )


def build_launch_template(
    name: str,
    group: NodeGroup,
    *,
    image: Image,
    slots: list[InterfaceSlot],
    subnet_id: pulumi.Input[str],
    security_group_ids: Sequence[pulumi.Input[str]],
    instance_profile_arn: pulumi.Input[str] | None,
    placement_group: pulumi.Input[str] | None,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
    fleet_user_data: pulumi.Input[str] | None = None,
    metadata_tags: bool = False,
) -> aws.ec2.LaunchTemplate:
    """``fleet_user_data`` set: the template of a compute group's fleet (see the module doc).
    ``metadata_tags``: the instances read their tags through IMDS (a fleet node of a cluster whose nodes
    configure themselves reads its name from its ``gpufleet:host`` tag; the tags hold nothing secret)."""
    fleet = fleet_user_data is not None
    tagged = LAUNCH_TAGGED + (() if fleet else capacity.spot_tag_resource_types(group.capacity))
    tagged += ("instance",) if fleet else ()
    at_launch = launch_tags(tags)
    specs = [
        aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=at_launch) for kind in tagged
    ]
    kept = KEPT + (() if image.pinned else KEPT_FAMILY_IMAGE)
    return aws.ec2.LaunchTemplate(
        f"{name}-{group.name}-lt",
        description=f"gpufleet {name}: node group {group.name} ({group.instance_type})",
        image_id=image.id,
        instance_type=group.instance_type,
        update_default_version=True,
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=rules.IMDS_HOP_LIMIT,
            instance_metadata_tags="enabled" if metadata_tags else "disabled",
        ),
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=image.root_device_name,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=group.root_volume_gib,
                    volume_type="gp3",
                    encrypted="true",
                    delete_on_termination="true",
                ),
            )
        ],
        network_interfaces=[network_interface_args(s, subnet_id, security_group_ids) for s in slots],
        iam_instance_profile=(
            aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=instance_profile_arn)
            if instance_profile_arn is not None
            else None
        ),
        placement=(
            aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_group)
            if placement_group is not None
            else None
        ),
        tag_specifications=specs,
        user_data=_user_data(fleet_user_data),
        **capacity.market_args(group.capacity, fleet=fleet),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=list(kept))),
    )


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _user_data(text: pulumi.Input[str] | None) -> pulumi.Input[str] | None:
    """The user data as EC2 takes it in a launch template: base64 (an Output when a key is one)."""
    if not text:
        return None
    if isinstance(text, str):
        return _base64(text)
    later: pulumi.Input[str] = text  # an Output or an awaitable: from_input's overloads take either as Input
    return pulumi.Output.from_input(later).apply(_base64)
