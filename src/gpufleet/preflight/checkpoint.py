"""The checkpoint plan (``checkpoint`` in the spec) against the shared filesystem: how big a checkpoint is,
how long it takes at the filesystem's provisioned throughput, what share of the interval that is, whether
``keep`` of them fit, and the interval that minimizes the time lost to failures plus the time spent writing.

Figures, all first order. The write time is the checkpoint's size over the filesystem's aggregate provisioned
throughput: the best case, every rank writing its shard at once (torch.distributed.checkpoint does). The
interval is Young's, ``sqrt(2 x write time x MTBF)`` (J. W. Young, "A first order approximation to the optimum
checkpoint interval", Communications of the ACM 17(9), 1974), with the cluster's MTBF the node's over the
number of compute nodes (one node's failure stops a data-parallel job). What a run loses to checkpoints and
failures is about ``write/interval + interval/(2 x MTBF)`` of its time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from gpufleet.catalog import Catalog
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.durable import MADE_WITH_THE_CLUSTER, WITH_A_DURABLE_COPY, durable_copy_of
from gpufleet.spec.model import (
    CHECKPOINT_STATE_BYTES,
    AzureLustreFilesystem,
    CheckpointPlan,
    ClusterSpec,
    FsxLustreFilesystem,
    ManagedLustreFilesystem,
)

CHECK = "checkpoint_plan"
# Above this share of the interval spent writing, the plan is flagged: Meta kept Llama 3's 405B run above 90 %
# effective training time with failures included (arXiv:2407.21783, section 3.3.4), so checkpoint writes
# alone at 10 % already spend that whole budget.
MAX_OVERHEAD = 0.10
# An interval further than this factor from Young's is flagged: at 2x either way the time lost to
# checkpoints and failures is 25 % above the minimum (write/T + T/2M at T = 2 T* or T*/2 over 2 sqrt(d/2M)).
INTERVAL_FACTOR = 2.0
# FSx for Lustre SCRATCH_2's baseline throughput, MB/s per TiB of storage (docs.aws.amazon.com/fsx/latest/
# LustreGuide/ssd-storage.html, "File system performance for SSD storage options", read 2026-11-24; it
# bursts above this on network credits). PERSISTENT_2 and Managed Lustre take theirs from the spec's
# throughput_per_tib (FSx PerUnitStorageThroughput 125/250/500/1000 MB/s/TiB, docs.aws.amazon.com/fsx/latest/
# LustreGuide/managing-throughput-capacity.html; Managed Lustre's performance tiers, the same four figures,
# cloud.google.com/managed-lustre/docs/create-instance; both read 2026-11-24).
FSX_SCRATCH_2_MB_S_PER_TIB = 200


@dataclass(frozen=True)
class Throughput:
    """The shared filesystem's provisioned throughput and capacity, where the spec fixes them."""

    mb_s: float | None  # decimal megabytes per second, aggregate
    capacity_bytes: int | None
    what: str  # how the figure follows from the spec, for the message


@dataclass(frozen=True)
class CheckpointFigures:
    bytes: int
    write_s: float | None
    overhead: float | None  # write time / interval
    cluster_mtbf_s: float
    best_interval_s: float | None  # Young's
    needed_bytes: int  # keep complete ones plus the one being written
    throughput: Throughput

    def lost_share(self, interval_s: float) -> float | None:
        """The share of a run lost to writes and to the work redone after failures, at ``interval_s``."""
        if self.write_s is None:
            return None
        return self.write_s / interval_s + interval_s / (2 * self.cluster_mtbf_s)


def filesystem_throughput(spec: ClusterSpec) -> Throughput:
    fs = spec.filesystem
    if isinstance(fs, FsxLustreFilesystem):
        tib = fs.size_gib / 1024
        per_tib = FSX_SCRATCH_2_MB_S_PER_TIB if fs.deployment_type == "SCRATCH_2" else fs.throughput_per_tib
        if per_tib is None:
            return Throughput(None, fs.size_gib << 30, "FSx for Lustre without throughput_per_tib")
        what = f"FSx for Lustre {fs.deployment_type}, {tib:,.2f} TiB x {per_tib} MB/s per TiB"
        return Throughput(tib * per_tib, fs.size_gib << 30, what)
    if isinstance(fs, ManagedLustreFilesystem):
        tib = fs.size_gib / 1024
        what = f"Managed Lustre, {tib:,.2f} TiB x {fs.throughput_per_tib} MB/s per TiB"
        return Throughput(tib * fs.throughput_per_tib, fs.size_gib << 30, what)
    if isinstance(fs, AzureLustreFilesystem):
        what = f"Azure Managed Lustre {fs.sku}, {fs.size_tib} TiB x {fs.throughput_per_tib} MB/s per TiB"
        return Throughput(float(fs.size_tib * fs.throughput_per_tib), fs.size_tib << 40, what)
    capacity = getattr(fs, "size_gib", None)
    return Throughput(None, capacity << 30 if capacity else None, f"a {fs.kind} filesystem")


def checkpoint_figures(spec: ClusterSpec, plan: CheckpointPlan) -> CheckpointFigures:
    size = plan.parameters * CHECKPOINT_STATE_BYTES[plan.state]
    throughput = filesystem_throughput(spec)
    write_s = size / (throughput.mb_s * 1e6) if throughput.mb_s else None
    mtbf_s = plan.node_mtbf.total_seconds() / max(spec.compute_count, 1)
    return CheckpointFigures(
        bytes=size,
        write_s=write_s,
        overhead=write_s / plan.interval.total_seconds() if write_s is not None else None,
        cluster_mtbf_s=mtbf_s,
        best_interval_s=math.sqrt(2 * write_s * mtbf_s) if write_s is not None else None,
        needed_bytes=(plan.keep + 1) * size,
        throughput=throughput,
    )


def _time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _size(count: int) -> str:
    return f"{count / 1e9:,.1f} GB" if count >= 1e8 else f"{count / 1e6:,.1f} MB"


@check(CHECK)
def checkpoint_plan(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    plan = spec.checkpoint
    if plan is None:
        return
    if spec.filesystem.kind == "none":
        yield Finding(
            Severity.WARNING,
            CHECK,
            "filesystem",
            "checkpoint is planned but the cluster has no shared filesystem: a job resumed on other nodes "
            "cannot read it. Add a filesystem",
        )
        return
    fs = spec.filesystem
    if fs.kind in MADE_WITH_THE_CLUSTER and durable_copy_of(spec) is None:
        exportable = fs.kind in WITH_A_DURABLE_COPY
        yield Finding(
            Severity.WARNING,
            CHECK,
            "filesystem.data_repository" if exportable else "filesystem",
            f"the {fs.kind} filesystem is made and deleted with the cluster and has no durable copy: the "
            "checkpoints on it are lost at 'gpufleet down'. "
            + (
                "Add filesystem.data_repository (docs/training.md, 'Checkpoints and gpufleet down'): "
                "down then exports them to it first"
                if exportable
                else "Copy them off before down, or use a filesystem with a data_repository"
            ),
        )
    figures = checkpoint_figures(spec, plan)
    interval_s = plan.interval.total_seconds()
    head = (
        f"a checkpoint is {_size(figures.bytes)} ({plan.parameters:,} parameters x "
        f"{CHECKPOINT_STATE_BYTES[plan.state]} bytes, {plan.state}); the cluster's {spec.compute_count} "
        f"compute node(s) fail about every {_time(figures.cluster_mtbf_s)}"
    )
    if figures.write_s is None or figures.overhead is None or figures.best_interval_s is None:
        yield Finding(
            Severity.INFO,
            CHECK,
            "checkpoint",
            f"{head}; {figures.throughput.what} has no provisioned throughput in the spec, so the write "
            "time is not known here: validation.training measures it on the cluster",
        )
    else:
        best = figures.best_interval_s
        lost, lost_best = figures.lost_share(interval_s), figures.lost_share(best)
        assert lost is not None and lost_best is not None
        yield Finding(
            Severity.INFO,
            CHECK,
            "checkpoint",
            f"{head}; it writes in {_time(figures.write_s)} at {figures.throughput.mb_s:,.0f} MB/s "
            f"({figures.throughput.what}), {figures.overhead:.1%} of the {_time(interval_s)} interval; "
            f"writes and redone work cost about {lost:.1%} of the run, {lost_best:.1%} at the best "
            f"interval, {_time(best)}",
        )
        if figures.overhead > MAX_OVERHEAD:
            yield Finding(
                Severity.WARNING,
                CHECK,
                "checkpoint.interval",
                f"writing a checkpoint ({_time(figures.write_s)}) takes {figures.overhead:.0%} of the "
                f"{_time(interval_s)} interval (more than {MAX_OVERHEAD:.0%}): lengthen the interval, or "
                "provision more throughput (throughput_per_tib or size_gib)",
            )
        if not best / INTERVAL_FACTOR <= interval_s <= best * INTERVAL_FACTOR:
            yield Finding(
                Severity.WARNING,
                CHECK,
                "checkpoint.interval",
                f"the interval {_time(interval_s)} is far from the one that loses least for this cluster, "
                f"{_time(best)} (Young's, from a {_time(figures.write_s)} write and a failure every "
                f"{_time(figures.cluster_mtbf_s)}): at it writes and redone work cost {lost_best:.1%} of "
                f"the run, at yours {lost:.1%}",
            )
    capacity = figures.throughput.capacity_bytes
    if capacity is not None and figures.needed_bytes > capacity:
        yield Finding(
            Severity.WARNING,
            CHECK,
            "checkpoint.keep",
            f"keeping {plan.keep} checkpoint(s) and writing the next needs {_size(figures.needed_bytes)}, "
            f"more than the filesystem's {_size(capacity)}: lower keep or raise the filesystem's size_gib",
        )


def checkpoint_json(spec: ClusterSpec) -> dict[str, object] | None:
    """The plan's figures for ``gpufleet plan --json`` (None without a ``checkpoint`` block)."""
    plan = spec.checkpoint
    if plan is None:
        return None
    figures = checkpoint_figures(spec, plan)
    interval_s = plan.interval.total_seconds()
    best = figures.best_interval_s
    return {
        "bytes": figures.bytes,
        "throughput_mb_s": figures.throughput.mb_s,
        "throughput_from": figures.throughput.what,
        "write_s": figures.write_s,
        "interval_s": interval_s,
        "overhead": figures.overhead,
        "cluster_mtbf_s": figures.cluster_mtbf_s,
        "best_interval_s": best,
        "lost_share": figures.lost_share(interval_s),
        "lost_share_at_best": figures.lost_share(best) if best else None,
        "needed_bytes": figures.needed_bytes,
        "capacity_bytes": figures.throughput.capacity_bytes,
    }
