"""The one helper that turns a spec into each cloud's tags or labels.

AWS tags: ``gpufleet:cluster``, ``gpufleet:expires-at`` (ISO 8601, UTC) and the spec's tags.
Azure tags: the AWS keys and values (Azure tag names may hold ':'; values are free text up to 256
characters), on the cluster's resource group and on every resource in it.
GCP labels: ``gpufleet-cluster``, ``gpufleet-expires-at`` and the spec's tags; label values allow only
``[a-z0-9_-]`` up to 63 characters, so the expiry is written as ``20261122t0930z``.
The lifecycle reaper reads both forms back with ``parse_expiry``.

A baked image (``gpufleet image build``) is not part of any cluster: it carries the spec's tags and its
own record instead, ``gpufleet:image=baked``, ``gpufleet:image-hash`` (the content hash,
``gpufleet.infra.images``), ``gpufleet:image-base`` (the image it was made from) and
``gpufleet:image-created``; GCP labels ``gpufleet-image``, ``gpufleet-image-hash`` (the hash's first 63
characters), ``gpufleet-image-base`` (the base image or family name, in the label alphabet) and
``gpufleet-image-created``. Without a cluster or expiry tag, neither a cluster's leftover check nor the
expiry sweep counts it; ``gpufleet image list`` and the retention rule find it by these.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.spec.model import ClusterSpec

AWS_CLUSTER_TAG = "gpufleet:cluster"
AWS_EXPIRES_TAG = "gpufleet:expires-at"
AZURE_CLUSTER_TAG = AWS_CLUSTER_TAG
AZURE_EXPIRES_TAG = AWS_EXPIRES_TAG
GCP_CLUSTER_LABEL = "gpufleet-cluster"
GCP_EXPIRES_LABEL = "gpufleet-expires-at"
AWS_IMAGE_TAG = "gpufleet:image"
AWS_IMAGE_HASH_TAG = "gpufleet:image-hash"
AWS_IMAGE_BASE_TAG = "gpufleet:image-base"
AWS_IMAGE_CREATED_TAG = "gpufleet:image-created"
GCP_IMAGE_LABEL = "gpufleet-image"
GCP_IMAGE_HASH_LABEL = "gpufleet-image-hash"
GCP_IMAGE_BASE_LABEL = "gpufleet-image-base"
GCP_IMAGE_CREATED_LABEL = "gpufleet-image-created"
_GCP_LABEL_VALUE = 63
_GCP_TIME = "%Y%m%dt%H%Mz"
_ISO_TIME = "%Y-%m-%dT%H:%M:%SZ"


def expires_at(spec: ClusterSpec, created_at: datetime) -> datetime:
    """When the cluster expires: its creation time plus the spec's ttl, to the minute, in UTC."""
    created = created_at.astimezone(UTC).replace(second=0, microsecond=0)
    return created + spec.lifetime.ttl


def expires_at_text(spec: ClusterSpec, created_at: datetime) -> str:
    """The expiry as the stack outputs and AWS's tag write it: ISO 8601 in UTC, ``2026-11-22T09:30:00Z``."""
    return expires_at(spec, created_at).strftime(_ISO_TIME)


def aws_tags(spec: ClusterSpec, created_at: datetime) -> dict[str, str]:
    tags = dict(spec.tags)
    tags[AWS_CLUSTER_TAG] = spec.name
    tags[AWS_EXPIRES_TAG] = expires_at_text(spec, created_at)
    return tags


def azure_tags(spec: ClusterSpec, created_at: datetime) -> dict[str, str]:
    """Azure's tags: the same keys and values as AWS's."""
    return aws_tags(spec, created_at)


def gcp_labels(spec: ClusterSpec, created_at: datetime) -> dict[str, str]:
    labels = dict(spec.tags)
    labels[GCP_CLUSTER_LABEL] = spec.name
    labels[GCP_EXPIRES_LABEL] = expires_at(spec, created_at).strftime(_GCP_TIME).lower()
    return labels


def parse_expiry(value: str) -> datetime:
    """Read an expiry written by ``aws_tags`` or ``gcp_labels`` back into an aware datetime."""
    value = value.strip()
    for fmt in (_ISO_TIME, _GCP_TIME):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"not a gpufleet expiry: {value!r}")


def aws_image_tags(spec: ClusterSpec, digest: str, base: str, created_at: datetime) -> dict[str, str]:
    """The tags of a baked AMI: the spec's, and the image's record (no cluster, no expiry)."""
    return {
        **spec.tags,
        "Name": f"gpufleet-baked-{digest[:12]}",
        AWS_IMAGE_TAG: "baked",
        AWS_IMAGE_HASH_TAG: digest,
        AWS_IMAGE_BASE_TAG: base,
        AWS_IMAGE_CREATED_TAG: created_at.astimezone(UTC).strftime(_ISO_TIME),
    }


def gcp_label_value(text: str) -> str:
    """``text`` in the label alphabet (lower-case letters, digits, ``-`` and ``_``), at most 63 long."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in text.lower())
    return cleaned[-_GCP_LABEL_VALUE:]  # the end of a path names the image; its start is the project


def gcp_image_labels(spec: ClusterSpec, digest: str, base: str, created_at: datetime) -> dict[str, str]:
    """The labels of a baked GCP image: the spec's, and the image's record (no cluster, no expiry)."""
    return {
        **spec.tags,
        GCP_IMAGE_LABEL: "baked",
        GCP_IMAGE_HASH_LABEL: digest[:_GCP_LABEL_VALUE],
        GCP_IMAGE_BASE_LABEL: gcp_label_value(base.rsplit("/", 1)[-1]),
        GCP_IMAGE_CREATED_LABEL: created_at.astimezone(UTC).strftime(_GCP_TIME).lower(),
    }
