"""Before ``gpufleet down`` deletes an Azure Managed Lustre file system with a ``data_repository``, archive it
to its Blob container and wait.

The file system is the one ``filesystem.py`` makes: ``amlFilesystems/<cluster>-lustre`` in the cluster's
resource group. Azure Resource Manager's REST API (``arm.py``), api-version 2024-03-01 (what azure-native
3.29 creates the file system with). Sources, read 2026-11-27:
- ``POST .../Microsoft.StorageCache/amlFilesystems/{name}/archive`` with ``{"filesystemPath": "/"}``
  ("Lustre file system path to archive relative to the file system root. Specify '/' to archive all
  modified data": AmlFilesystemArchiveInfo; operation ``amlFilesystems_Archive``, ``ARCHIVE_DOC``);
- the progress is the file system's own ``properties.hsm.archiveStatus``: a list of ``{filesystemPath,
  status: {state, lastStartedTime, lastCompletionTime, percentComplete, errorCode, errorMessage}}``
  (AmlFilesystemArchive, AmlFilesystemArchiveStatus), ``state`` one of NotConfigured, Canceled, Completed,
  Failed, InProgress, Cancelling, FSScanInProgress, Idle (ArchiveStatusType).
An archive is done when the entry of the path is Completed with a ``lastCompletionTime`` later than the
one before the request; Failed or Canceled refuse the teardown with Azure's error code and message.
The caller needs ``Microsoft.StorageCache/amlFilesystems/archive/action`` (the deployer role has it).
"""

from __future__ import annotations

from typing import Any

from gpufleet.infra.azure.arm import ARM, Http, error_message, session_http
from gpufleet.infra.azure.filesystem import amlfs_name
from gpufleet.infra.durable import TIMEOUT_FLAG, Wait, refuse
from gpufleet.progress import Reporter
from gpufleet.spec.model import AzureLustreFilesystem, AzureProvider, ClusterSpec

ARCHIVE_DOC = "https://learn.microsoft.com/en-us/rest/api/storagecache/aml-filesystems/archive"
API = "2024-03-01"
FAILED = ("Failed", "Canceled")


def export(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``export`` (``infra/durable.py``): ``archive`` for the spec's cluster."""
    provider, fs = spec.provider, spec.filesystem
    assert isinstance(provider, AzureProvider) and isinstance(fs, AzureLustreFilesystem)
    return archive(spec.name, fs, provider.subscription, wait, reporter)


def discard(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``discard``: nothing (no rule against deleting a file system that archives is
    known; not tried on a real one)."""
    return []


def filesystem_url(subscription: str, cluster: str) -> str:
    from gpufleet.infra.azure.component import resource_group_name

    group = resource_group_name(cluster)
    return (
        f"{ARM}/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.StorageCache/"
        f"amlFilesystems/{amlfs_name(cluster)}"
    )


def _status(filesystem: dict[str, Any], path: str) -> dict[str, Any]:
    hsm = (filesystem.get("properties") or {}).get("hsm") or {}
    for entry in hsm.get("archiveStatus") or []:
        if entry.get("filesystemPath") == path:
            return dict(entry.get("status") or {})
    return {}


def archive(
    cluster: str,
    fs: AzureLustreFilesystem,
    subscription: str,
    wait: Wait,
    reporter: Reporter,
    *,
    http: Http | None = None,
) -> list[str]:
    """Archive the file system's ``data_repository.file_system_path`` to its container and wait; one line
    for the teardown report. Raises ``ExportRefused`` when the archive did not complete."""
    assert fs.data_repository is not None
    http = http or session_http("the Managed Lustre archive")
    url = filesystem_url(subscription, cluster)
    path = fs.data_repository.file_system_path
    target = fs.data_repository.container_url
    what = f"Managed Lustre {amlfs_name(cluster)} ({fs.mount_point.rstrip('/')}{path} -> {target})"
    status, filesystem = http("GET", f"{url}?api-version={API}", None)
    if status == 404:
        return [f"no Managed Lustre file system {amlfs_name(cluster)}: nothing to archive"]
    if status >= 400:
        raise refuse(
            what, f"reading the file system failed ({status}): {error_message(filesystem)}", retry=_retry()
        )
    before = _status(filesystem, path).get("lastCompletionTime")
    status, answer = http("POST", f"{url}/archive?api-version={API}", {"filesystemPath": path})
    if status >= 400:
        raise refuse(what, f"archive failed ({status}): {error_message(answer)}", retry=_retry())
    reporter.info(f"archiving {what}")
    while True:
        if wait.expired():
            raise refuse(
                what,
                f"the archive was still running after {wait.timeout_s:.0f} s "
                f"({_progress(_status(filesystem, path))})",
                retry="watch it with 'az amlfs show' (properties.hsm.archiveStatus) and run 'gpufleet down "
                f"SPEC' again when it is done, or with a longer {TIMEOUT_FLAG}",
            )
        wait.pause()
        status, filesystem = http("GET", f"{url}?api-version={API}", None)
        if status >= 400:
            raise refuse(
                what,
                f"reading the file system failed ({status}): {error_message(filesystem)}",
                retry=_retry(),
            )
        current = _status(filesystem, path)
        state = current.get("state")
        reporter.info(f"archive of {amlfs_name(cluster)}: {_progress(current)}")
        if state in FAILED:
            code = current.get("errorCode") or "?"
            raise refuse(
                what,
                f"the archive ended {state} ({code}: {current.get('errorMessage') or 'no message'})",
                retry="check the container's role assignments for the HPC Cache Resource Provider (Storage "
                "Account Contributor, Storage Blob Data Contributor: docs/azure.md) and run 'gpufleet down "
                "SPEC' again",
            )
        if state == "Completed" and current.get("lastCompletionTime") != before:
            return [f"archived {what}: completed {current.get('lastCompletionTime')}"]


def _progress(status: dict[str, Any]) -> str:
    return f"{status.get('state', 'no status yet')}, {status.get('percentComplete', 0)}% done"


def _retry() -> str:
    return (
        "check the credentials ('az login') and that they hold Microsoft.StorageCache/amlFilesystems/"
        "archive/action (examples/ci/azure/deployer-role.json), then run 'gpufleet down SPEC' again"
    )
