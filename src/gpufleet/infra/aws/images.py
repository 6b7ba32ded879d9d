"""Baked AMIs in one region (``gpufleet image list / delete``, ``up``'s look-up, the retention rule).

An AMI is gpufleet's when it is owned by the account and tagged ``gpufleet:image=baked``
(``gpufleet.infra.tags.aws_image_tags``). Its users are the instances not yet terminated that were
launched from it, named by their ``gpufleet:cluster`` tag. Deleting one deregisters it and deletes the EBS
snapshots behind it (deregistering alone keeps them, and bills them: EC2's "Deregister an AMI" page,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/deregister-ami.html); it is refused while any instance
runs from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.errors import ProvisionError
from gpufleet.infra.images import CloudImage
from gpufleet.infra.tags import (
    AWS_CLUSTER_TAG,
    AWS_IMAGE_BASE_TAG,
    AWS_IMAGE_CREATED_TAG,
    AWS_IMAGE_HASH_TAG,
    AWS_IMAGE_TAG,
)

_LIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]


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
    return users


def delete_image(region: str, image: CloudImage, *, session: Any = None) -> list[str]:
    """Deregister the AMI and delete its snapshots; refused while an instance runs from it."""
    ec2 = _ec2(region, session)
    with _aws_errors(f"looking for instances of {image.id}"):
        users = _users(ec2, [image.id]).get(image.id)
    if users:
        raise ProvisionError(
            f"baked image {image.id} is in use by {', '.join(sorted(users))}; not deleted",
            hint="take those clusters down first ('gpufleet down SPEC'), then delete the image",
        )
    with _aws_errors(f"deregistering {image.id}"):
        ec2.deregister_image(ImageId=image.id)
    removed = [f"ami {image.id}"]
    for snapshot in image.snapshots:
        with _aws_errors(f"deleting snapshot {snapshot} of the deregistered {image.id}"):
            ec2.delete_snapshot(SnapshotId=snapshot)
        removed.append(f"ebs snapshot {snapshot}")
    return removed
