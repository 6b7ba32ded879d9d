"""The machine images: found by family (newest match of the owner's name pattern) or pinned by id.

A family's newest image is what the first ``pulumi up`` finds; the launch template keeps it afterwards
(``launch_template.KEPT_FAMILY_IMAGE``), so a later release does not replace live nodes.

Creates nothing: each distinct image is one ``aws:ec2/getAmi`` lookup. GPU groups get the spec's
family; groups without GPUs (the head node) get the plain Ubuntu release of that family. Each group's
image is built for its instance type's CPU architecture (the catalog's ``cpu_arch``: arm64 for the
Grace-based P6e-GB200, x86_64 otherwise), so an x86 head node and arm64 compute nodes mix. With a baked
AMI of the spec's roles and pins (``gpufleet image build``, which refuses specs that mix CPU
architectures), every group boots that one image, which is kept like a family's (a newer bake does not
replace live nodes; docs/aws.md).
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
    return rules.group_family(ami.family, item is not None and item.gpu is not None)


class Images:
    """Looks each image up once per program run."""

    def __init__(self, ami: AwsAmi, opts: pulumi.InvokeOptions, baked_id: str | None = None) -> None:
        self._ami = ami
        self._opts = opts
        self._baked_id = baked_id
        self._cache: dict[str, Image] = {}

    def for_type(self, item: InstanceType | None) -> Image:
        arch = item.cpu_arch if item is not None else "x86_64"
        key = self._baked_id or self._ami.id or f"{family_for(self._ami, item)}/{arch}"
        if key not in self._cache:
            self._cache[key] = self._lookup(family_for(self._ami, item), arch)
        return self._cache[key]

    def _lookup(self, family: str, arch: str) -> Image:
        image_id = self._baked_id or self._ami.id
        if image_id is not None:
            result = aws.ec2.get_ami_output(
                filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[image_id])],
                opts=self._opts,
            )
            # A baked image is kept like a family's: only a pinned ami.id is the user's to roll out.
            return Image(
                id=result.id, root_device_name=result.root_device_name, pinned=self._baked_id is None
            )
        query = rules.AMI_FAMILIES[family]
        result = aws.ec2.get_ami_output(
            most_recent=True,
            owners=[query.owner],
            filters=[
                aws.ec2.GetAmiFilterArgs(name="name", values=[query.pattern(arch)]),
                aws.ec2.GetAmiFilterArgs(name="architecture", values=[arch]),
                aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            ],
            opts=self._opts,
        )
        return Image(id=result.id, root_device_name=result.root_device_name)
