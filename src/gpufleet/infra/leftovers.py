"""What the clouds' leftover finders report, on any cloud: one resource still there for a cluster
(``Leftover``), and a cluster past its expiry (``ExpiredCluster``, for ``gpufleet reap``); ``settle``
polls a leftover finder after a destroy until the listing APIs' lag has passed."""

from __future__ import annotations

import time
from collections.abc import Callable
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


# ---- after a destroy: wait out the listing APIs' lag ---------------------------------------------------
# The tagging API (AWS) and Cloud Asset Inventory (GCP) are eventually consistent: right after a destroy
# they can still list what is gone ("state changes can take time to propagate",
# https://cloud.google.com/asset-inventory/docs/best-practice, read 2026-11-24). Lag only ever lists too
# much: a resource made long before the destroy is not missing from a read, so an empty read is final.

LEFTOVER_BOUND_S = 300.0  # give up waiting for the reads to agree after this long
LEFTOVER_INTERVAL_S = 15.0  # between two reads


@dataclass(frozen=True)
class Listed:
    """A leftover still listed at the last read, and for how long it has been listed without a break."""

    leftover: Leftover
    seconds: float
    reads: int  # how many reads in a row listed it, the last one included

    def __str__(self) -> str:
        return f"{self.leftover}: still listed after {self.seconds:.0f} s ({self.reads} read(s) in a row)"


@dataclass(frozen=True)
class Settled:
    """What the polling found: the leftovers of the last read, and whether two reads agreed on them."""

    leftovers: list[Listed]
    reads: int
    seconds: float
    agreed: bool  # False: the bound passed while the reads still changed

    def summary(self) -> str:
        if not self.leftovers:
            return f"nothing left ({self.reads} read(s) over {self.seconds:.0f} s)"
        how = (
            "two reads in a row agree"
            if self.agreed
            else f"the reads still changed when the {self.seconds:.0f} s bound passed"
        )
        return f"{len(self.leftovers)} resource(s) still listed ({how})"


def settle(
    read: Callable[[], list[Leftover]],
    *,
    bound_s: float = LEFTOVER_BOUND_S,
    interval_s: float = LEFTOVER_INTERVAL_S,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> Settled:
    """Read the leftovers until a read is empty, or two reads in a row list the same resources in the same
    states, or ``bound_s`` has passed; ``note`` hears what each read that is not the last still lists."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    start = clock()
    first_seen: dict[str, float] = {}
    streak: dict[str, int] = {}
    previous: set[str] | None = None
    reads = 0
    while True:
        current = read()
        reads += 1
        now = clock()
        keys = {str(item) for item in current}
        first_seen = {key: first_seen.get(key, now) for key in keys}  # a break in the listing restarts
        streak = {key: streak.get(key, 0) + 1 for key in keys}
        agreed = not current or keys == previous
        if agreed or now - start + interval_s > bound_s:
            listed = [Listed(item, now - first_seen[str(item)], streak[str(item)]) for item in current]
            return Settled(listed, reads, now - start, agreed)
        if note is not None:
            note(f"read {reads}: {len(current)} resource(s) listed; reading again in {interval_s:.0f} s")
        previous = keys
        sleep(interval_s)
