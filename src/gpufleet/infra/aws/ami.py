"""The machine images: found by family (newest match of the owner's name pattern) or pinned by id.

A family's newest image is what the first ``pulumi up`` finds; the launch template keeps it afterwards
(``launch_template.KEPT_FAMILY_IMAGE``), so a later release does not replace live nodes.

Creates nothing: each distinct image is one ``aws:ec2/getAmi`` lookup. GPU groups get the spec's
family; groups without GPUs (the head node) get the plain Ubuntu release of that family. With a baked
AMI of the spec's roles and pins (``gpufleet image build``), every group boots that one image, which is
kept like a family's (a newer bake does not replace live nodes; docs/aws.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import InstanceType
from gpufleet.catalog import aws as rules
from gpufleet.spec.model import AwsAmi


@dataclass(frozen=True)
class Image:
    id: pulumi.Input[str]
    root_device_name: pulumi.Input[str]
    pinned: bool = False  # the spec names the image (ami.id): a change of it is meant to roll the nodes


def family_for(ami: AwsAmi, item: InstanceType | None) -> str:
    has_gpu = item is not None and item.gpu is not None
    return ami.family if has_gpu else rules.PLAIN_FAMILY[ami.family]


class Images:
    """Looks each image up once per program run."""

    def __init__(self, ami: AwsAmi, opts: pulumi.InvokeOptions, baked_id: str | None = None) -> None:
        self._ami = ami
        self._opts = opts
        self._baked_id = baked_id
        self._cache: dict[str, Image] = {}

    def for_type(self, item: InstanceType | None) -> Image:
        key = self._baked_id or self._ami.id or family_for(self._ami, item)
        if key not in self._cache:
            self._cache[key] = self._lookup(key)
        return self._cache[key]

    def _lookup(self, key: str) -> Image:
        if key in (self._baked_id, self._ami.id):
            result = aws.ec2.get_ami_output(
                filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[key])],
                opts=self._opts,
            )
            # A baked image is kept like a family's: only a pinned ami.id is the user's to roll out.
            pinned = self._baked_id is None
            return Image(id=result.id, root_device_name=result.root_device_name, pinned=pinned)
        query = rules.AMI_FAMILIES[key]
        result = aws.ec2.get_ami_output(
            most_recent=True,
            owners=[query.owner],
            filters=[
                aws.ec2.GetAmiFilterArgs(name="name", values=[query.name_pattern]),
                aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
                aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            ],
            opts=self._opts,
        )
        return Image(id=result.id, root_device_name=result.root_device_name)
