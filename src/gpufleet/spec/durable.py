"""Which filesystems a cluster loses with it, and which can keep a durable copy: facts of the spec's
filesystem models, read by preflight (``checkpoint``), infra (``infra/durable.py``, whose ``EXPORTERS``
names the module that exports each kind below) and lifecycle (``down``). A leaf, so that preflight reads
them without importing infra (tests/test_import_cycles.py)."""

from __future__ import annotations

from gpufleet.spec.model import (
    AzureLustreFilesystem,
    ClusterSpec,
    FsxLustreFilesystem,
    ManagedLustreFilesystem,
)

# Filesystem kinds that gpufleet makes with the cluster and deletes with it (an NFS server or a bare-metal
# mount outlives the cluster): what is on them is gone after ``down`` unless it has a durable copy.
MADE_WITH_THE_CLUSTER = ("volume", "fsx_lustre", "managed_lustre", "filestore", "azure_lustre")

# Filesystem kinds that can have a durable copy (``infra.durable.EXPORTERS`` exports each).
WITH_A_DURABLE_COPY = ("fsx_lustre", "managed_lustre", "azure_lustre")


def durable_copy_of(spec: ClusterSpec) -> str | None:
    """The durable copy of the cluster's filesystem (an S3, Cloud Storage or Blob container path), None
    without one."""
    fs = spec.filesystem
    if isinstance(fs, FsxLustreFilesystem) and fs.data_repository is not None:
        return fs.data_repository.s3_path
    if isinstance(fs, ManagedLustreFilesystem) and fs.data_repository is not None:
        return fs.data_repository.gcs_path
    if isinstance(fs, AzureLustreFilesystem) and fs.data_repository is not None:
        return fs.data_repository.container_url
    return None
