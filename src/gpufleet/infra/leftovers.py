"""What the clouds' leftover finders report, on any cloud: one resource still there for a cluster
(``Leftover``), and a cluster past its expiry (``ExpiredCluster``, for ``gpufleet reap``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Leftover:
    kind: str  # AWS: e.g. "ec2:instance"; GCP: the Cloud Asset type, e.g. compute.googleapis.com/Instance
    id: str  # AWS: the resource id; GCP: the full resource name (//compute.googleapis.com/projects/...)
    detail: str = ""  # state, location

    def __str__(self) -> str:
        return f"{self.kind} {self.id}" + (f" ({self.detail})" if self.detail else "")

    @property
    def short_name(self) -> str:
        return self.id.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class ExpiredCluster:
    cluster: str
    expires_at: datetime  # the earliest expiry among its resources
    resources: int  # how many resources carry the expiry


def expired_clusters(tags: list[tuple[str | None, str | None]], now: datetime) -> list[ExpiredCluster]:
    """Clusters whose expiry (the earliest of their resources') has passed, from (cluster, expiry text)
    pairs read off resources' tags or labels; unreadable expiries are skipped."""
    from gpufleet.infra.tags import parse_expiry

    seen: dict[str, tuple[datetime, int]] = {}
    for cluster, stamp in tags:
        if not cluster or not stamp:
            continue
        try:
            when = parse_expiry(stamp)
        except ValueError:
            continue
        earliest, count = seen.get(cluster, (when, 0))
        seen[cluster] = (min(earliest, when), count + 1)
    return sorted(
        (ExpiredCluster(name, when, count) for name, (when, count) in seen.items() if when <= now),
        key=lambda c: c.expires_at,
    )
