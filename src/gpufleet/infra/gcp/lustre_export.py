"""Before ``gpufleet down`` deletes a Managed Lustre instance with a ``data_repository``, export it to
Cloud Storage and wait.

The instance is the one ``filesystem.py`` makes: ``projects/{project}/locations/{zone}/instances/
{cluster}-lustre``. Managed Lustre's REST API (v1), called through google-auth's authorized session on
Application Default Credentials like ``images.py``; tests pass a fake ``Http``. Sources, read 2026-11-24:
- ``POST https://lustre.googleapis.com/v1/{name}:exportData`` with ``lustrePath.path`` (must start with
  ``/``, default ``/``), ``gcsPath.uri`` (``gs://<bucket>/<optional path>/``: "If a path inside the bucket
  is specified, it must end with a forward slash"), ``requestId``, optional ``serviceAccount`` (unset:
  the Managed Lustre service agent does the transfer); answers a long-running Operation
  (cloud.google.com/managed-lustre/docs/reference/rest/v1/projects.locations.instances/exportData). The
  caller needs ``lustre.instances.exportData`` (roles/lustre.admin or Editor;
  cloud.google.com/managed-lustre/docs/access-control).
- ``GET https://lustre.googleapis.com/v1/{name=projects/*/locations/*/operations/*}``: the Operation,
  ``done``, ``error`` (google.rpc.Status ``code``, ``message``), ``metadata`` an ExportDataMetadata whose
  ``operationMetadata`` (TransferOperationMetadata) holds ``counters`` (TransferCounters:
  ``foundObjectsCount``, ``objectsCopiedCount``, ``objectsSkippedCount``, ``objectsFailedCount``, ...) and
  ``errorSummaries`` (``errorCode``, ``errorCount``) (.../projects.locations.operations/get; the
  google-cloud-lustre client reference for ExportDataMetadata, TransferOperationMetadata,
  TransferCounters, ErrorSummary). int64 counters come as JSON strings (proto3 JSON mapping).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.infra.durable import TIMEOUT_FLAG, Wait, refuse
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, GcpProvider, ManagedLustreFilesystem

LUSTRE = "https://lustre.googleapis.com/v1"
# Http(method, url, json body or None) -> (HTTP status, the JSON answer).
Http = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any]]]


def export(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``export`` (``infra/durable.py``): ``export_lustre`` for the spec's cluster."""
    provider, fs = spec.provider, spec.filesystem
    assert isinstance(provider, GcpProvider) and isinstance(fs, ManagedLustreFilesystem)
    return export_lustre(spec.name, fs, provider.project, provider.zone, wait, reporter)


def discard(spec: ClusterSpec, wait: Wait, reporter: Reporter) -> list[str]:
    """The exporter's ``discard``: nothing. No rule like FSx's (no delete while a task runs) is known
    for Managed Lustre; not tried on a real instance."""
    return []


def session_http() -> Http:
    from gpufleet.infra.gcp.images import authorized_session

    session = authorized_session("the Managed Lustre export")

    def call(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        answer = session.request(method, url, json=body, timeout=60)
        try:
            data = dict(answer.json())
        except ValueError:
            data = {"error": {"message": answer.text[:400]}}
        return answer.status_code, data

    return call


def instance_name(project: str, zone: str, cluster: str) -> str:
    return f"projects/{project}/locations/{zone}/instances/{cluster}-lustre"


def gcs_uri(path: str) -> str:
    """``gs://bucket`` stays; ``gs://bucket/folder`` gets the trailing slash exportData requires."""
    bucket_and_folder = path.removeprefix("gs://")
    return path if "/" not in bucket_and_folder or path.endswith("/") else path + "/"


def export_lustre(
    cluster: str,
    fs: ManagedLustreFilesystem,
    project: str,
    zone: str,
    wait: Wait,
    reporter: Reporter,
    *,
    http: Http | None = None,
) -> list[str]:
    """Export the instance's ``data_repository.file_system_path`` to its ``gcs_path`` and wait; one line
    for the teardown report. Raises ``ExportRefused`` when the export did not complete."""
    assert fs.data_repository is not None
    http = http or session_http()
    name = instance_name(project, zone, cluster)
    source, target = fs.data_repository.file_system_path, gcs_uri(fs.data_repository.gcs_path)
    what = f"Managed Lustre instance {name} ({fs.mount_point.rstrip('/')}{source} -> {target})"
    status, instance = http("GET", f"{LUSTRE}/{name}", None)
    if status == 404:
        return [f"no Managed Lustre instance {name}: nothing to export"]
    if status >= 400:
        raise refuse(what, f"reading the instance failed ({status}): {_message(instance)}", retry=_retry())
    body = {"lustrePath": {"path": source}, "gcsPath": {"uri": target}, "requestId": str(uuid.uuid4())}
    status, operation = http("POST", f"{LUSTRE}/{name}:exportData", body)
    if status >= 400:
        raise refuse(what, f"exportData failed ({status}): {_message(operation)}", retry=_retry())
    reporter.info(f"exporting {what}: operation {operation.get('name', '?')}")
    operation = _finish(http, operation, what, wait, reporter)
    return [f"exported {what}: operation {operation.get('name', '?')} done, {_counts(operation)}"]


def _finish(
    http: Http, operation: dict[str, Any], what: str, wait: Wait, reporter: Reporter
) -> dict[str, Any]:
    op_name = operation.get("name", "?")
    while not operation.get("done"):
        if wait.expired():
            raise refuse(
                what,
                f"export operation {op_name} was still running after {wait.timeout_s:.0f} s, "
                f"{_counts(operation)}",
                retry=f"watch it with 'gcloud lustre operations describe {op_name}' and run 'gpufleet down "
                f"SPEC' again when it is done, or with a longer {TIMEOUT_FLAG}",
            )
        wait.pause()
        status, answer = http("GET", f"{LUSTRE}/{op_name}", None)
        if status >= 400:
            raise refuse(
                what, f"reading operation {op_name} failed ({status}): {_message(answer)}", retry=_retry()
            )
        operation = answer
        reporter.info(f"export operation {op_name}: {_counts(operation)}")
    failed = _number(_counters(operation).get("objectsFailedCount"))
    if "error" in operation or failed:
        error = operation.get("error") or {}
        summaries = (operation.get("metadata") or {}).get("operationMetadata", {}).get("errorSummaries") or []
        detail = "; ".join(f"{s.get('errorCode', '?')} x{s.get('errorCount', '?')}" for s in summaries)
        reason = error.get("message") or "objects failed"
        code = f" (code {error['code']})" if "code" in error else ""
        raise refuse(
            what,
            f"export operation {op_name} failed{code}: {reason}; {_counts(operation)}"
            + (f"; errors: {detail}" if detail else ""),
            retry=f"see 'gcloud lustre operations describe {op_name}' (the bucket's permissions for the "
            "Managed Lustre service agent, the path), fix it and run 'gpufleet down SPEC' again",
        )
    return operation


def _counters(operation: dict[str, Any]) -> dict[str, Any]:
    metadata = operation.get("metadata") or {}
    return dict((metadata.get("operationMetadata") or {}).get("counters") or {})


def _number(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _counts(operation: dict[str, Any]) -> str:
    counters = _counters(operation)
    return (
        f"{_number(counters.get('objectsCopiedCount'))} of {_number(counters.get('foundObjectsCount'))} "
        f"object(s) copied, {_number(counters.get('objectsSkippedCount'))} already there, "
        f"{_number(counters.get('objectsFailedCount'))} failed"
    )


def _message(answer: dict[str, Any]) -> str:
    return str((answer.get("error") or {}).get("message") or answer)[:400]


def _retry() -> str:
    return (
        "check the credentials ('gcloud auth application-default login') and that they hold "
        "lustre.instances.exportData (roles/lustre.admin), then run 'gpufleet down SPEC' again"
    )


if TYPE_CHECKING:
    # The type checker holds this module to the ``Exporter`` protocol (``durable.exporter_for`` loads it).
    from gpufleet.infra.durable import Exporter
    from gpufleet.infra.gcp import lustre_export as _this

    _exporter: Exporter = _this
