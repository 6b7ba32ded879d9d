"""Baked AMIs in one region (``gpufleet image list / delete``, ``up``'s look-up, the retention rule).

An AMI is gpufleet's when it is owned by the account and tagged ``gpufleet:image=baked``
(``gpufleet.infra.tags.aws_image_tags``). Its users are the instances not yet terminated that were
launched from it, named by their ``gpufleet:cluster`` tag, and every launch template whose latest or
default version names it, and every live EC2 Fleet whose template version names it: a template keeps its
first image (``launch_template.KEPT``), so the next fleet it launches (a replaced group, a lost node) needs
the AMI long after its instances are gone (else ``InvalidAMIID.NotFound``; AWS audit 2026-11-24 N16).
Deleting one deregisters it and deletes the EBS snapshots behind it (deregistering alone keeps them,
and bills them: EC2's "Deregister an AMI" page,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/deregister-ami.html); it is refused while any instance
runs from it or any template or live fleet names it.

``AwsImages`` is what the bakers (``gpufleet.bake``) and the retention rule ask of AWS about its images
(``gpufleet.infra.images.BakeSource``): the base image and builder of a bake, its builder program, and
these look-ups.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.errors import ProvisionError
from gpufleet.infra.images import BUILDER_ROLES, BakeRequest, CloudImage, bake_group
from gpufleet.infra.tags import (
    AWS_CLUSTER_TAG,
    AWS_IMAGE_BASE_TAG,
    AWS_IMAGE_CREATED_TAG,
    AWS_IMAGE_HASH_TAG,
    AWS_IMAGE_TAG,
)
from gpufleet.spec.model import AwsProvider, ClusterSpec, NodeGroup

_LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
# A fleet in any other state (deleted, deleted_running, deleted_terminating, failed) launches nothing more
# (API_FleetData FleetState, docs.aws.amazon.com/AWSEC2/latest/APIReference/API_FleetData.html, read
# 2026-11-24).
_LIVE_FLEET = ("submitted", "active", "modifying")


def _ec2(region: str, session: Any) -> Any:
    import boto3

    return (session or boto3.session.Session(region_name=region)).client("ec2", region_name=region)


@contextmanager
def _aws_errors(what: str) -> Iterator[None]:
    """An EC2 error (denied, throttled, unreachable) as a ``ProvisionError`` that says what failed."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (BotoCoreError, ClientError) as exc:
        raise ProvisionError(f"{what} failed: {exc}") from None


def list_images(region: str, *, session: Any = None) -> list[CloudImage]:
    """gpufleet's baked AMIs in ``region``, newest first, each with the clusters running from it."""
    ec2 = _ec2(region, session)
    with _aws_errors(f"listing baked AMIs in {region}"):
        found = ec2.describe_images(
            Owners=["self"], Filters=[{"Name": f"tag:{AWS_IMAGE_TAG}", "Values": ["baked"]}]
        ).get("Images", [])
        users = _users(ec2, [image["ImageId"] for image in found])
    result = []
    for image in found:
        tags = {tag["Key"]: tag["Value"] for tag in image.get("Tags") or []}
        snapshots = tuple(
            mapping["Ebs"]["SnapshotId"]
            for mapping in image.get("BlockDeviceMappings") or []
            if mapping.get("Ebs", {}).get("SnapshotId")
        )
        result.append(
            CloudImage(
                id=image["ImageId"],
                name=image.get("Name", ""),
                digest=tags.get(AWS_IMAGE_HASH_TAG, ""),
                base=tags.get(AWS_IMAGE_BASE_TAG, ""),
                created=tags.get(AWS_IMAGE_CREATED_TAG) or image.get("CreationDate", ""),
                snapshots=snapshots,
                used_by=tuple(sorted(users.get(image["ImageId"], set()))),
            )
        )
    return sorted(result, key=lambda image: image.created, reverse=True)


def _users(ec2: Any, image_ids: list[str]) -> dict[str, set[str]]:
    """AMI id -> the clusters (or bare instance ids) with an instance from it that is not terminated."""
    if not image_ids:
        return {}
    users: dict[str, set[str]] = {}
    filters = [
        {"Name": "image-id", "Values": image_ids},
        {"Name": "instance-state-name", "Values": _LIVE},
    ]
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page.get("Reservations", []):
            for instance in reservation["Instances"]:
                tags = {tag["Key"]: tag["Value"] for tag in instance.get("Tags") or []}
                who = tags.get(AWS_CLUSTER_TAG) or f"instance {instance['InstanceId']}"
                users.setdefault(instance["ImageId"], set()).add(who)
    wanted = set(image_ids)
    for template, image in _template_images(ec2):
        if image in wanted:
            users.setdefault(image, set()).add(f"launch template {template}")
    for fleet, image in _fleet_images(ec2):
        if image in wanted:
            users.setdefault(image, set()).add(f"ec2 fleet {fleet}")
    return users


def _template_images(ec2: Any) -> Iterator[tuple[str, str]]:
    """(template name, AMI id) of every launch template's latest and default version: with only
    ``$Latest``/``$Default`` and no template named, DescribeLaunchTemplateVersions describes every template
    of the account (API_DescribeLaunchTemplateVersions, read 2026-11-24)."""
    pages = ec2.get_paginator("describe_launch_template_versions").paginate(Versions=["$Latest", "$Default"])
    for page in pages:
        for version in page.get("LaunchTemplateVersions", []):
            image = (version.get("LaunchTemplateData") or {}).get("ImageId")
            if image:
                yield version.get("LaunchTemplateName") or version.get("LaunchTemplateId", "?"), image


def _fleet_images(ec2: Any) -> Iterator[tuple[str, str]]:
    """(fleet id, AMI id) of the template version each live fleet names (an older version than latest)."""
    from botocore.exceptions import ClientError

    for page in ec2.get_paginator("describe_fleets").paginate():
        for fleet in page.get("Fleets", []):
            if fleet.get("FleetState") not in _LIVE_FLEET:
                continue
            for config in fleet.get("LaunchTemplateConfigs") or []:
                named = config.get("LaunchTemplateSpecification") or {}
                if not named.get("LaunchTemplateId"):
                    continue
                try:
                    found = ec2.describe_launch_template_versions(
                        LaunchTemplateId=named["LaunchTemplateId"],
                        Versions=[str(named.get("Version", "$Default"))],
                    ).get("LaunchTemplateVersions", [])
                except ClientError:  # its template is gone: the fleet can launch nothing from it
                    continue
                for version in found:
                    image = (version.get("LaunchTemplateData") or {}).get("ImageId")
                    if image:
                        yield fleet["FleetId"], image


def delete_image(region: str, image: CloudImage, *, session: Any = None) -> list[str]:
    """Deregister the AMI and delete its snapshots; refused while an instance runs from it."""
    ec2 = _ec2(region, session)
    with _aws_errors(f"looking for instances of {image.id}"):
        users = _users(ec2, [image.id]).get(image.id)
    if users:
        raise ProvisionError(
            f"baked image {image.id} is in use by {', '.join(sorted(users))}; not deleted",
            hint="take those clusters down first ('gpufleet down SPEC'; it deletes their launch templates "
            "and fleets too), then delete the image",
        )
    with _aws_errors(f"deregistering {image.id}"):
        ec2.deregister_image(ImageId=image.id)
    removed = [f"ami {image.id}"]
    for snapshot in image.snapshots:
        with _aws_errors(f"deleting snapshot {snapshot} of the deregistered {image.id}"):
            ec2.delete_snapshot(SnapshotId=snapshot)
        removed.append(f"ebs snapshot {snapshot}")
    return removed


def _provider(spec: ClusterSpec) -> AwsProvider:
    assert isinstance(spec.provider, AwsProvider)
    return spec.provider


class AwsImages:
    """Baked AMIs: what a bake starts from and makes (``ImageBuilderAws``), and where they are found."""

    # 8 vCPUs for the DKMS and nccl-tests builds; in every commercial region (docs/aws.md).
    builder_cpu_type = "c6i.2xlarge"

    def bake_base(self, spec: ClusterSpec) -> str:
        from gpufleet.catalog import load_catalog
        from gpufleet.infra.aws.ami import family_for

        ami = _provider(spec).ami
        return ami.id or family_for(ami, load_catalog().get(bake_group(spec).instance_type))

    def bake_host(self, spec: ClusterSpec, group: NodeGroup) -> dict[str, Any]:
        from gpufleet.catalog import aws_interfaces as interfaces
        from gpufleet.catalog import load_catalog
        from gpufleet.catalog.images import load_image_manifests
        from gpufleet.infra.aws.ami import family_for
        from gpufleet.infra.outputs import host_record

        item = load_catalog().get(group.instance_type)
        efa = sum(1 for slot in interfaces.group_layout(spec, group, item) if slot.is_efa)
        return host_record(
            name=f"{spec.name}-builder",
            roles=BUILDER_ROLES,
            private_ip="",
            instance_type=group.instance_type,
            item=item,
            fabric_interfaces=efa,
            image=load_image_manifests().for_family(
                family_for(_provider(spec).ami, item), item.cpu_arch if item else "x86_64"
            ),
        )

    def builder_program(self, request: BakeRequest) -> dict[str, Any]:
        from gpufleet.infra.aws.image_builder import ImageBuilderAws

        return ImageBuilderAws(request.name, request).stack_outputs

    def image_source(self, outputs: dict[str, Any]) -> str:
        return str(outputs["instance_id"])

    def image_scope(self, spec: ClusterSpec) -> str:
        return _provider(spec).region

    def baked_by_invoke(self, spec: ClusterSpec, digest: str) -> CloudImage | None:
        import pulumi_aws as aws

        region = _provider(spec).region
        found = aws.ec2.get_ami_ids(
            owners=["self"],
            filters=[
                {"name": f"tag:{AWS_IMAGE_HASH_TAG}", "values": [digest]},
                {"name": "state", "values": ["available"]},
            ],
            region=region,
        )
        if not found.ids:
            return None
        newest = found.ids[0]  # newest first (sort_ascending defaults to false)
        ami = aws.ec2.get_ami(
            owners=["self"], filters=[{"name": "image-id", "values": [newest]}], region=region
        )
        tags = ami.tags or {}
        return CloudImage(
            id=newest,
            name=ami.name,
            digest=digest,
            base=tags.get(AWS_IMAGE_BASE_TAG, ""),
            created=ami.creation_date,
        )

    def list_images(self, scope: str) -> list[CloudImage]:
        return list_images(scope)

    def delete_image(self, scope: str, image: CloudImage) -> list[str]:
        return delete_image(scope, image)
