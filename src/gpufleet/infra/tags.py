"""The one helper that turns a spec into each cloud's tags or labels.

AWS tags: ``gpufleet:cluster``, ``gpufleet:expires-at`` (ISO 8601, UTC) and the spec's tags.
GCP labels: ``gpufleet-cluster``, ``gpufleet-expires-at`` and the spec's tags; label values allow only
``[a-z0-9_-]`` up to 63 characters, so the expiry is written as ``20261122t0930z``.
The lifecycle reaper reads both forms back with ``parse_expiry``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.spec.model import ClusterSpec

AWS_CLUSTER_TAG = "gpufleet:cluster"
AWS_EXPIRES_TAG = "gpufleet:expires-at"
GCP_CLUSTER_LABEL = "gpufleet-cluster"
GCP_EXPIRES_LABEL = "gpufleet-expires-at"
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
