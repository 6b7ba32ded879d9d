"""What ``gpufleet down`` does with the files on the shared filesystem before destroying it.

- A filesystem with a durable copy (FSx for Lustre with a ``data_repository``, Managed Lustre with a
  ``data_repository``) is exported first and ``down`` waits for the export, at most ``--export-timeout``
  seconds (``infra/aws/fsx_export.py``, ``infra/gcp/lustre_export.py``). An export that fails or times out
  raises ``ExportRefused`` (exit 4): nothing is destroyed. ``--discard-checkpoints`` skips the export (and
  cancels an FSx data repository task still running, which would stop FSx deleting the file system).
- A filesystem the cluster made without a durable copy (the local volume, FSx or Managed Lustre without a
  ``data_repository``, Filestore) goes with the cluster: when the spec plans checkpoints (``checkpoint``),
  ``down`` says that they are deleted with it. An NFS export (bare metal) is not the cluster's and stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.infra.durable import DISCARD_FLAG, Wait, exporter_for
from gpufleet.progress import Reporter
from gpufleet.spec.durable import MADE_WITH_THE_CLUSTER, durable_copy_of
from gpufleet.spec.model import ClusterSpec

DEFAULT_TIMEOUT_S = 3600


@dataclass(frozen=True)
class DurableCopyOptions:
    discard: bool = False  # --discard-checkpoints: destroy without exporting
    timeout_s: float = DEFAULT_TIMEOUT_S  # --export-timeout


def new_wait(timeout_s: float) -> Wait:
    return Wait(timeout_s)


def before_destroy(spec: ClusterSpec, reporter: Reporter, options: DurableCopyOptions) -> list[str]:
    """Export the filesystem to its durable copy and wait, or say why not; lines for the teardown report,
    each also told to ``reporter`` as it is known. Raises ``ExportRefused`` when an export did not
    complete: the caller must then destroy nothing."""
    lines = _export_or_warn(spec, reporter, options)
    for line in lines:
        reporter.info(line)
    return lines


def _export_or_warn(spec: ClusterSpec, reporter: Reporter, options: DurableCopyOptions) -> list[str]:
    fs = spec.filesystem
    copy = durable_copy_of(spec)
    mount = getattr(fs, "mount_point", "")
    if copy is None:
        if spec.checkpoint is not None and fs.kind in MADE_WITH_THE_CLUSTER:
            return [
                f"warning: the {fs.kind} filesystem at {mount} has no durable copy: the checkpoints on it "
                "are deleted with the cluster (copy them off first; on AWS and GCP a data_repository in "
                "the spec makes down export them)"
            ]
        return []
    exporter = exporter_for(spec)
    assert exporter is not None
    wait = new_wait(options.timeout_s)
    if options.discard:
        return [
            f"export to {copy} skipped ({DISCARD_FLAG}): files on the {fs.kind} filesystem at {mount} "
            "that had not reached it are deleted with the cluster",
            *exporter.discard(spec, wait, reporter),
        ]
    with reporter.step(f"export the {fs.kind} filesystem at {mount} to {copy}"):
        return exporter.export(spec, wait, reporter)
