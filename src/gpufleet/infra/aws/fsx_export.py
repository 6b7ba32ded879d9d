"""Before ``gpufleet down`` deletes an FSx for Lustre file system linked to S3, export what was written.

The cluster's file systems are found by their ``gpufleet:cluster`` tag (as ``leftovers.py`` finds them);
each one's data repository associations give the folders linked to S3. One EXPORT_TO_REPOSITORY data
repository task per file system, over every association's folder, is started and waited for; it exports
only what is new or changed since the last export, so it is also how an association with an auto-export
policy is verified: FSx has no call that reports auto-export's backlog. A task that fails, fails a file,
or is still running at the deadline raises ``ExportRefused`` and ``down`` destroys nothing.

FSx API (botocore's service model, fsx 2018-03-01, botocore 1.44.5 in the project's venv, read
2026-11-24; ``.venv/lib/python3.11/site-packages/botocore/data/fsx/2018-03-01/service-2.json.gz``):
- ``CreateDataRepositoryTask``: ``Type`` ``EXPORT_TO_REPOSITORY``, ``FileSystemId`` and ``Report`` are
  required (``Report.Enabled`` false: no completion report); ``Paths`` are "relative to the mount point
  of the file system" (``/fsx/path1`` -> ``path1``), none meaning the root. Fails with
  ``DataRepositoryTaskExecuting`` while another task runs ("Wait until the existing task has completed,
  then create the new task").
- ``DescribeDataRepositoryTasks``: ``TaskIds``, or ``Filters`` ``file-system-id`` / ``task-lifecycle``;
  a task's ``Lifecycle`` is PENDING, EXECUTING, FAILED, SUCCEEDED, CANCELED or CANCELING, with
  ``FailureDetails.Message`` and ``Status`` (``TotalCount``, ``SucceededCount``, ``FailedCount``). "You
  cannot delete an FSx for Lustre file system if there are data repository tasks for the file system in
  the PENDING or EXECUTING states."
- ``DescribeDataRepositoryAssociations``: ``Filters`` ``file-system-id``; each association's
  ``FileSystemPath``, ``DataRepositoryPath``, ``Lifecycle`` (AVAILABLE, MISCONFIGURED, ...) and
  ``FailureDetails.Message``.
- ``DescribeFileSystems``: ``FileSystemId``, ``Lifecycle``, ``Tags``; pages by ``NextToken``.
- ``CancelDataRepositoryTask``: ``TaskId``; a PENDING or EXECUTING task is canceled (files already
  exported stay exported); ``DataRepositoryTaskEnded`` when it had already ended.

With ``--discard-checkpoints`` nothing is exported, but a task still running (the export of an earlier
``down`` that timed out) would stop FSx from deleting the file system, so ``cancel_fsx_tasks`` cancels it
and waits for it to end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.infra.durable import DISCARD_FLAG, TIMEOUT_FLAG, ExportRefused, Wait, refuse
from gpufleet.infra.tags import AWS_CLUSTER_TAG
from gpufleet.progress import Reporter
from gpufleet.spec.model import AwsProvider, ClusterSpec, FsxLustreFilesystem

FINISHED = ("SUCCEEDED", "FAILED", "CANCELED")
RUNNING = ["PENDING", "EXECUTING", "CANCELING"]
# A file system in these states can run a data repository task.
USABLE = ("AVAILABLE", "UPDATING")


def export(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``export`` (``infra/durable.py``): ``export_fsx`` for the spec's cluster."""
    provider, fs = spec.provider, spec.filesystem
    assert isinstance(provider, AwsProvider) and isinstance(fs, FsxLustreFilesystem)
    return export_fsx(spec.name, fs, provider.region, wait, reporter)


def discard(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``discard``: ``cancel_fsx_tasks`` for the spec's cluster."""
    provider = spec.provider
    assert isinstance(provider, AwsProvider)
    return cancel_fsx_tasks(spec.name, provider.region, wait, reporter)


def fsx_client(region: str) -> Any:
    import boto3

    return boto3.session.Session(region_name=region).client("fsx", region_name=region)


def export_fsx(
    cluster: str,
    fs: FsxLustreFilesystem,
    region: str,
    wait: Wait,
    reporter: Reporter,
    *,
    client: Any | None = None,
) -> list[str]:
    """Export every linked folder of the cluster's FSx file systems to S3 and wait; one line per file
    system for the teardown report. Raises ``ExportRefused`` when an export did not complete."""
    from botocore.exceptions import BotoCoreError, ClientError

    fsx = client if client is not None else fsx_client(region)
    try:
        systems = _cluster_file_systems(fsx, cluster)
        if not systems:
            return [f"no FSx file system of cluster {cluster} in {region}: nothing to export"]
        return [_export_one(fsx, system, fs, wait, reporter) for system in systems]
    except (BotoCoreError, ClientError) as exc:
        raise refuse(
            f"the FSx file system of cluster {cluster} ({fs.mount_point})",
            f"the FSx API answered: {exc}",
            retry="fix the cause (credentials; the permissions fsx:DescribeFileSystems, "
            "fsx:DescribeDataRepositoryAssociations, fsx:CreateDataRepositoryTask and "
            "fsx:DescribeDataRepositoryTasks) and run 'gpufleet down SPEC' again",
        ) from None


def _pages(call: Any, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    token = ""
    while True:
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        found.extend(page.get(key, []))
        token = page.get("NextToken") or ""
        if not token:
            return found


def _cluster_file_systems(fsx: Any, cluster: str) -> list[dict[str, Any]]:
    return [
        system
        for system in _pages(fsx.describe_file_systems, "FileSystems")
        if {t["Key"]: t["Value"] for t in system.get("Tags") or []}.get(AWS_CLUSTER_TAG) == cluster
        and system.get("Lifecycle") not in ("DELETING",)
    ]


def _export_one(
    fsx: Any, system: dict[str, Any], fs: FsxLustreFilesystem, wait: Wait, reporter: Reporter
) -> str:
    fs_id = system["FileSystemId"]
    lifecycle = system.get("Lifecycle", "?")
    if lifecycle not in USABLE:
        raise refuse(
            f"FSx file system {fs_id} ({fs.mount_point})",
            f"its lifecycle is {lifecycle}, which runs no export",
            retry=f"wait until 'aws fsx describe-file-systems --file-system-ids {fs_id}' says AVAILABLE "
            "and run 'gpufleet down SPEC' again",
        )
    associations = _pages(
        fsx.describe_data_repository_associations,
        "Associations",
        Filters=[{"Name": "file-system-id", "Values": [fs_id]}],
    )
    linked = fs.data_repository.s3_path if fs.data_repository else "S3"
    if not associations:
        raise refuse(
            f"FSx file system {fs_id} ({fs.mount_point})",
            f"it has no data repository association, though the spec links it to {linked}",
            retry="run 'gpufleet up SPEC' to create the association, then 'gpufleet down SPEC'",
        )
    links = ", ".join(
        f"{fs.mount_point.rstrip('/')}{a.get('FileSystemPath', '/')} -> {a.get('DataRepositoryPath', '?')}"
        for a in associations
    )
    what = f"FSx file system {fs_id} ({links})"
    for association in associations:
        if association.get("Lifecycle") != "AVAILABLE":
            reason = (association.get("FailureDetails") or {}).get("Message") or "no failure details"
            raise refuse(
                what,
                f"association {association.get('AssociationId', '?')} is "
                f"{association.get('Lifecycle', '?')}: {reason}",
                retry="fix the association (its S3 bucket and permissions; 'aws fsx "
                "describe-data-repository-associations') and run 'gpufleet down SPEC' again",
            )
    paths = sorted({a.get("FileSystemPath", "/").strip("/") for a in associations})
    task = _start(fsx, fs_id, [] if "" in paths else paths, what, wait, reporter)
    task = _finish(fsx, task, what, wait, reporter)
    status = task.get("Status") or {}
    return (
        f"exported {what}: data repository task {task['TaskId']} SUCCEEDED, "
        f"{status.get('SucceededCount', 0)} of {status.get('TotalCount', 0)} file(s)"
    )


def _start(
    fsx: Any, fs_id: str, paths: list[str], what: str, wait: Wait, reporter: Reporter
) -> dict[str, Any]:
    """CreateDataRepositoryTask; while another task runs on the file system (an earlier ``down`` whose
    wait timed out, or the user's own), wait for it first."""
    from botocore.exceptions import ClientError

    request: dict[str, Any] = {
        "Type": "EXPORT_TO_REPOSITORY",
        "FileSystemId": fs_id,
        "Report": {"Enabled": False},
    }
    if paths:
        request["Paths"] = paths
    while True:
        try:
            task: dict[str, Any] = fsx.create_data_repository_task(**request)["DataRepositoryTask"]
            reporter.info(f"exporting {what}: data repository task {task['TaskId']}")
            return task
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "DataRepositoryTaskExecuting":
                raise
        running = _running(fsx, fs_id)
        names = ", ".join(f"{t['TaskId']} ({t['Type']}, {t['Lifecycle']})" for t in running) or "one"
        if wait.expired():
            raise refuse(
                what,
                f"another data repository task, {names}, was still running after {wait.timeout_s:.0f} s, "
                "so the export could not start",
                retry=f"run 'gpufleet down SPEC' again when it has finished, or with a longer {TIMEOUT_FLAG}",
            )
        reporter.info(f"waiting for the data repository task already running on {fs_id}: {names}")
        wait.pause()


def _running(fsx: Any, fs_id: str) -> list[dict[str, Any]]:
    """The file system's data repository tasks that have not ended."""
    return _pages(
        fsx.describe_data_repository_tasks,
        "DataRepositoryTasks",
        Filters=[
            {"Name": "file-system-id", "Values": [fs_id]},
            {"Name": "task-lifecycle", "Values": RUNNING},
        ],
    )


def cancel_fsx_tasks(
    cluster: str, region: str, wait: Wait, reporter: Reporter, *, client: Any | None = None
) -> list[str]:
    """``--discard-checkpoints``: cancel the data repository tasks still running on the cluster's FSx file
    systems and wait (within ``wait``) until they end, so that destroy can delete them. Never raises for
    the FSx API: the user chose to destroy anyway; what could not be done is a warning line."""
    from botocore.exceptions import BotoCoreError, ClientError

    lines: list[str] = []
    try:
        fsx = client if client is not None else fsx_client(region)
        for system in _cluster_file_systems(fsx, cluster):
            fs_id = system["FileSystemId"]
            for task in _running(fsx, fs_id):
                if task["Lifecycle"] != "CANCELING":
                    try:
                        fsx.cancel_data_repository_task(TaskId=task["TaskId"])
                    except ClientError as exc:
                        if exc.response.get("Error", {}).get("Code") != "DataRepositoryTaskEnded":
                            raise
                lines.append(
                    f"canceled data repository task {task['TaskId']} ({task.get('Type', '?')}) on FSx "
                    f"file system {fs_id} ({DISCARD_FLAG})"
                )
                reporter.info(lines[-1])
            while still := _running(fsx, fs_id):
                if wait.expired():
                    names = ", ".join(f"{t['TaskId']} ({t['Lifecycle']})" for t in still)
                    lines.append(
                        f"warning: data repository task(s) {names} on FSx file system {fs_id} had not ended "
                        f"after {wait.timeout_s:.0f} s: FSx deletes no file system while one runs"
                    )
                    break
                wait.pause()
    except (BotoCoreError, ClientError) as exc:
        lines.append(
            f"warning: could not cancel the data repository tasks on cluster {cluster}'s FSx file system "
            f"({exc}): FSx deletes no file system while one runs"
        )
    return lines


def _finish(fsx: Any, task: dict[str, Any], what: str, wait: Wait, reporter: Reporter) -> dict[str, Any]:
    task_id = task["TaskId"]
    while task["Lifecycle"] not in FINISHED:
        if wait.expired():
            raise refuse(
                what,
                f"data repository task {task_id} was still {task['Lifecycle']} after "
                f"{wait.timeout_s:.0f} s, {_counts(task)}",
                retry=f"the task goes on: run 'gpufleet down SPEC' again later (it waits for the task and "
                f"exports what is left), or with a longer {TIMEOUT_FLAG}",
            )
        wait.pause()
        task = fsx.describe_data_repository_tasks(TaskIds=[task_id])["DataRepositoryTasks"][0]
        reporter.info(f"data repository task {task_id}: {task['Lifecycle']}, {_counts(task)}")
    failed = (task.get("Status") or {}).get("FailedCount") or 0
    if task["Lifecycle"] != "SUCCEEDED" or failed:
        reason = (task.get("FailureDetails") or {}).get("Message") or "no failure details"
        raise refuse(
            what,
            f"data repository task {task_id} {task['Lifecycle']}, {_counts(task)}: {reason}",
            retry=f"see 'aws fsx describe-data-repository-tasks --task-ids {task_id}' (the S3 bucket's "
            "permissions, its region, files changed while exporting), fix it and run 'gpufleet down SPEC' "
            "again",
        )
    return task


def _counts(task: dict[str, Any]) -> str:
    status = task.get("Status") or {}
    return (
        f"{status.get('SucceededCount', 0)} of {status.get('TotalCount', '?')} file(s) exported, "
        f"{status.get('FailedCount', 0)} failed"
    )


__all__ = ["ExportRefused", "cancel_fsx_tasks", "discard", "export", "export_fsx", "fsx_client"]


if TYPE_CHECKING:
    # The type checker holds this module to the ``Exporter`` protocol (``durable.exporter_for`` loads it).
    from gpufleet.infra.aws import fsx_export as _this
    from gpufleet.infra.durable import Exporter

    _exporter: Exporter = _this
