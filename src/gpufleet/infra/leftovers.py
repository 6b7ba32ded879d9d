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
    expires_at: datetime  # the cluster's expiry as its tags say it (see ``expired_clusters``)
    resources: int  # how many resources carry the expiry
    cluster_id: str | None = None  # the cluster's id (gpufleet.state); None: tagged before ids


@dataclass(frozen=True)
class ExpiryTag:
    """One resource's expiry tag or label, as the reaper reads it."""

    cluster: str | None
    stamp: str | None
    cluster_id: str | None = None
    # Read off a node that exists now (an instance or VM not terminated) whose tags or labels every
    # ``pulumi up`` rewrites: the cluster's current expiry, whatever older resources still say.
    live: bool = False


def expired_clusters(tags: list[ExpiryTag], now: datetime) -> list[ExpiredCluster]:
    """Clusters whose expiry has passed, from the expiry tags read off their resources.

    A cluster is its name and its id (two clusters of one name are two clusters). Its expiry is what its
    live nodes say when it has any (``ExpiryTag.live``: every ``up`` rewrites their tags, so a raised
    ``lifetime.ttl`` reaches them), else the *latest* any of its resources says: never the earliest, since
    a resource an edit did not reach (a volume tagged at launch, a resource the tagging API still lists
    after its deletion) keeps an older expiry, and the reaper must not destroy a cluster before its time.
    Unreadable expiries are skipped."""
    from gpufleet.infra.tags import parse_expiry

    seen: dict[tuple[str, str | None], tuple[datetime | None, datetime | None, int]] = {}
    for tag in tags:
        if not tag.cluster or not tag.stamp:
            continue
        try:
            when = parse_expiry(tag.stamp)
        except ValueError:
            continue
        key = (tag.cluster, tag.cluster_id or None)
        live, other, count = seen.get(key, (None, None, 0))
        if tag.live:
            live = max(live, when) if live is not None else when
        else:
            other = max(other, when) if other is not None else when
        seen[key] = (live, other, count + 1)
    found = []
    for (name, cluster_id), (live, other, count) in seen.items():
        expiry = live if live is not None else other
        if expiry is not None and expiry <= now:
            found.append(ExpiredCluster(name, expiry, count, cluster_id))
    return sorted(found, key=lambda c: (c.expires_at, c.cluster))


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
