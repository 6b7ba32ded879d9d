"""``gpufleet down`` and the filesystem's durable copy: export and wait, refuse (destroying nothing) when
the export fails or times out, skip it with --discard-checkpoints, and leave other filesystems alone.

moto 5.2.5's FSx backend has no data repository associations or tasks (moto/fsx/models.py: file systems
and backups only), so ``FakeFsx`` models them on botocore's FSx service model (fsx 2018-03-01, botocore
1.44.5, botocore/data/fsx/2018-03-01/service-2.json.gz, read 2026-11-24): the request and response
members, the task lifecycle PENDING -> EXECUTING -> SUCCEEDED/FAILED, ``Status`` counts, ``FailureDetails``,
and the ``DataRepositoryTaskExecuting`` error while another task runs. ``FakeLustre`` models Managed
Lustre's REST v1 long-running operation (exportData, operations.get; sources in
``gpufleet.infra.gcp.lustre_export``), int64 counters as JSON strings.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError, NoCredentialsError
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.infra.aws import fsx_export
from gpufleet.infra.baremetal.backend import BaremetalBackend
from gpufleet.infra.durable import Wait
from gpufleet.infra.gcp import lustre_export
from gpufleet.lifecycle import durable_copy, teardown
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
FS_ID = "fs-0123456789abcdef0"


class Clock:
    """Monotonic time that moves only when the code sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Recorder(BaremetalBackend):
    """The backend: records whether anything was destroyed."""

    def __init__(self) -> None:
        self.destroyed = False

    def destroy(self, spec, state, reporter):
        self.destroyed = True
        return ["cluster resources"]

    def leftovers(self, spec, state, reporter):
        return []

    def forget(self, spec, state):
        return ["stack record"]


class FakeFsx:
    """The FSx calls down makes, shaped as botocore's service model answers them. ``outcome`` is the
    task's end (SUCCEEDED, FAILED or None: it never ends); ``steps`` the describes it takes to get there;
    ``other`` is another task on the file system (an earlier down's export): while it is PENDING or
    EXECUTING, CreateDataRepositoryTask fails with DataRepositoryTaskExecuting. Canceled, it is CANCELING
    for one look, then CANCELED; with ``ends``, it SUCCEEDS after one look."""

    def __init__(
        self,
        cluster: str,
        *,
        outcome: str | None = "SUCCEEDED",
        steps: int = 2,
        associations: list[dict[str, Any]] | None = None,
    ) -> None:
        self.cluster, self.outcome, self.steps = cluster, outcome, steps
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.tasks: dict[str, dict[str, Any]] = {}
        self.describes = 0
        self.other: dict[str, Any] | None = None
        self.other_ends = False
        self.associations = (
            associations
            if associations is not None
            else [
                {
                    "AssociationId": "dra-0123456789abcdef0",
                    "FileSystemId": FS_ID,
                    "Lifecycle": "AVAILABLE",
                    "FileSystemPath": "/data",
                    "DataRepositoryPath": "s3://ml-team-ckpt/llm-p5",
                    "BatchImportMetaDataOnCreate": True,
                    "ImportedFileChunkSize": 1024,
                    "S3": {"AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
                    "CreationTime": datetime(2026, 11, 24, tzinfo=UTC),
                }
            ]
        )

    def describe_file_systems(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeFileSystems", kwargs))
        other = {
            "FileSystemId": "fs-0fffffffffffffff0",
            "FileSystemType": "LUSTRE",
            "Lifecycle": "AVAILABLE",
            "Tags": [{"Key": "gpufleet:cluster", "Value": "someone-else"}],
        }
        ours = {
            "FileSystemId": FS_ID,
            "FileSystemType": "LUSTRE",
            "Lifecycle": "AVAILABLE",
            "StorageCapacity": 2400,
            "DNSName": f"{FS_ID}.fsx.us-east-1.amazonaws.com",
            "Tags": [
                {"Key": "Name", "Value": f"{self.cluster}-fsx"},
                {"Key": "gpufleet:cluster", "Value": self.cluster},
            ],
        }
        # Two pages, as DescribeFileSystems pages by NextToken.
        if "NextToken" not in kwargs:
            return {"FileSystems": [other], "NextToken": "page-2"}
        return {"FileSystems": [ours]}

    def describe_data_repository_associations(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeDataRepositoryAssociations", kwargs))
        wanted = kwargs["Filters"][0]["Values"]
        return {"Associations": [a for a in self.associations if a["FileSystemId"] in wanted]}

    def create_data_repository_task(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("CreateDataRepositoryTask", kwargs))
        assert {"Type", "FileSystemId", "Report"} <= kwargs.keys()  # the model's required members
        if self.other and self.other["Lifecycle"] in ("PENDING", "EXECUTING"):
            raise ClientError(
                {
                    "Error": {
                        "Code": "DataRepositoryTaskExecuting",
                        "Message": "An existing data repository task is currently executing on the "
                        "file system.",
                    }
                },
                "CreateDataRepositoryTask",
            )
        task_id = f"task-0123456789abcdef{len(self.tasks)}"
        task = {
            "TaskId": task_id,
            "Lifecycle": "PENDING",
            "Type": kwargs["Type"],
            "CreationTime": datetime(2026, 11, 24, 23, 0, tzinfo=UTC),
            "FileSystemId": kwargs["FileSystemId"],
            "Paths": kwargs.get("Paths", []),
            "Report": kwargs["Report"],
            "Status": {"TotalCount": 0, "SucceededCount": 0, "FailedCount": 0},
        }
        self.tasks[task_id] = task
        return {"DataRepositoryTask": dict(task)}

    def describe_data_repository_tasks(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("DescribeDataRepositoryTasks", kwargs))
        if "Filters" in kwargs:  # the tasks of a lifecycle on the file system: the other one, if any
            lifecycles = next(f["Values"] for f in kwargs["Filters"] if f["Name"] == "task-lifecycle")
            found = [dict(self.other)] if self.other and self.other["Lifecycle"] in lifecycles else []
            if self.other and self.other["Lifecycle"] == "CANCELING":
                self.other["Lifecycle"] = "CANCELED"
            elif self.other and self.other_ends:
                self.other["Lifecycle"] = "SUCCEEDED"
            return {"DataRepositoryTasks": found}
        self.describes += 1
        task = self.tasks[kwargs["TaskIds"][0]]
        if self.describes >= self.steps and self.outcome is not None:
            task["Lifecycle"] = self.outcome
            task["EndTime"] = datetime(2026, 11, 24, 23, 5, tzinfo=UTC)
            if self.outcome == "SUCCEEDED":
                task["Status"] = {"TotalCount": 42, "SucceededCount": 42, "FailedCount": 0}
            else:
                task["Status"] = {"TotalCount": 42, "SucceededCount": 40, "FailedCount": 2}
                task["FailureDetails"] = {
                    "Message": "Failed to export 2 files: Access Denied on s3://ml-team-ckpt/llm-p5"
                }
        else:
            task["Lifecycle"] = "EXECUTING"
            task["StartTime"] = datetime(2026, 11, 24, 23, 1, tzinfo=UTC)
            task["Status"] = {"TotalCount": 42, "SucceededCount": 10, "FailedCount": 0}
        return {"DataRepositoryTasks": [dict(task)]}

    def cancel_data_repository_task(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("CancelDataRepositoryTask", kwargs))
        assert self.other is not None and kwargs == {"TaskId": self.other["TaskId"]}
        self.other["Lifecycle"] = "CANCELING"
        return {"Lifecycle": "CANCELING", "TaskId": kwargs["TaskId"]}

    def running(self, *, ends: bool = False) -> None:
        """Another export task runs on the file system (an earlier down's, which timed out)."""
        self.other_ends = ends
        self.other = {
            "TaskId": "task-0aaaaaaaaaaaaaaa0",
            "Lifecycle": "EXECUTING",
            "Type": "EXPORT_TO_REPOSITORY",
            "CreationTime": datetime(2026, 11, 24, 22, 0, tzinfo=UTC),
            "FileSystemId": FS_ID,
        }

    def named(self, operation: str) -> list[dict[str, Any]]:
        return [kwargs for name, kwargs in self.calls if name == operation]


class FakeLustre:
    """Managed Lustre's REST v1: GET the instance, POST :exportData (an Operation), GET the operation."""

    def __init__(self, *, error: dict[str, Any] | None = None, steps: int = 2, exists: bool = True) -> None:
        self.error, self.steps, self.exists = error, steps, exists
        self.calls: list[tuple[str, str, dict[str, Any] | None]] = []
        self.polls = 0

    def _operation(self, done: bool) -> dict[str, Any]:
        counters = {"foundObjectsCount": "12", "bytesFoundCount": "96000000000"}
        if done:
            copied, failed = ("10", "2") if self.error else ("12", "0")
            counters |= {"objectsCopiedCount": copied, "objectsFailedCount": failed}
        operation: dict[str, Any] = {
            "name": "projects/my-gpu-project/locations/europe-west1-b/operations/operation-1732489200-abc",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.lustre.v1.ExportDataMetadata",
                "operationMetadata": {
                    "sourceLustrePath": {"path": "/"},
                    "destinationGcsPath": {"uri": "gs://ml-team-ckpt/a3mega/"},
                    "counters": counters,
                    "transferType": "EXPORT",
                },
                "createTime": "2026-11-24T23:00:00Z",
                "target": "projects/my-gpu-project/locations/europe-west1-b/instances/a3mega-lustre",
                "verb": "exportData",
                "apiVersion": "v1",
            },
            "done": done,
        }
        if done and self.error:
            operation["error"] = self.error
            operation["metadata"]["operationMetadata"]["errorSummaries"] = [
                {"errorCode": "PERMISSION_DENIED", "errorCount": "2"}
            ]
        elif done:
            operation["response"] = {"@type": "type.googleapis.com/google.cloud.lustre.v1.ExportDataResponse"}
        return operation

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        self.calls.append((method, url, body))
        if url.endswith("/instances/a3mega-lustre"):
            if not self.exists:
                return 404, {"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}
            return 200, {"name": url.removeprefix(lustre_export.LUSTRE + "/"), "state": "ACTIVE"}
        if url.endswith(":exportData"):
            return 200, self._operation(done=False)
        self.polls += 1
        return 200, self._operation(done=self.polls >= self.steps)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(
        durable_copy, "new_wait", lambda t: Wait(t, poll_s=15, clock=clock, sleep=clock.sleep)
    )
    return clock


def _cluster(tmp_path, monkeypatch, example: str, change) -> tuple[Path, Recorder]:
    """A spec from ``example`` (changed by ``change``), its state folder, and the recording backend."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    change(data)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_spec(path)
    ClusterState.for_name(spec.name).begin(spec, path)
    backend = Recorder()
    monkeypatch.setattr(teardown, "backend_for", lambda spec: backend)
    monkeypatch.setattr(teardown, "save_before_teardown", lambda state, reporter: {})
    return path, backend


def _with_s3(data: dict[str, Any]) -> None:
    data["filesystem"]["data_repository"] = {"s3_path": "s3://ml-team-ckpt/llm-p5", "auto_export": True}
    data["checkpoint"] = {"parameters": "7B"}


def _with_gcs(data: dict[str, Any]) -> None:
    data["filesystem"]["data_repository"] = {"gcs_path": "gs://ml-team-ckpt/a3mega"}


@pytest.fixture
def aws(tmp_path, monkeypatch, clock):
    path, backend = _cluster(tmp_path, monkeypatch, "aws-p5.yaml", _with_s3)
    fake = FakeFsx(load_spec(path).name)
    monkeypatch.setattr(fsx_export, "fsx_client", lambda region: fake)
    return path, backend, fake


def _down(path: Path, *args: str):
    return CliRunner().invoke(app, ["down", str(path), *args])


def test_fsx_export_is_waited_for_then_the_cluster_is_destroyed(aws, clock):
    path, backend, fake = aws
    result = _down(path, "--json")
    assert result.exit_code == 0, result.output
    (create,) = fake.named("CreateDataRepositoryTask")
    assert create == {
        "Type": "EXPORT_TO_REPOSITORY",
        "FileSystemId": FS_ID,
        "Report": {"Enabled": False},
        "Paths": ["data"],  # the association's /data, relative to the file system's root
    }
    assert fake.tasks["task-0123456789abcdef0"]["Lifecycle"] == "SUCCEEDED"
    assert clock.now == 1030.0  # two polls of 15 s: it waited for the task
    assert backend.destroyed and not ClusterState.for_name("llm-p5").exists()
    (line,) = json.loads(result.stdout)["durable_copy"]
    assert "SUCCEEDED" in line and "42 of 42" in line and "/fsx/data -> s3://ml-team-ckpt/llm-p5" in line


def test_a_task_already_running_is_waited_for_first(aws, clock):
    path, backend, fake = aws
    fake.running(ends=True)
    result = _down(path)
    assert result.exit_code == 0, result.output
    assert len(fake.named("CreateDataRepositoryTask")) == 2 and backend.destroyed
    running = [c for c in fake.named("DescribeDataRepositoryTasks") if "Filters" in c]
    assert running[0]["Filters"][1] == {
        "Name": "task-lifecycle",
        "Values": ["PENDING", "EXECUTING", "CANCELING"],
    }


def _refused(result, backend: Recorder, cluster: str, *parts: str) -> None:
    """Exit 4, every part of the message there, nothing destroyed and the state folder kept."""
    assert result.exit_code == 4, result.output
    text = " ".join(result.output.split())
    assert not [part for part in parts if part not in text], result.output
    assert not backend.destroyed and ClusterState.for_name(cluster).exists()


def test_a_failed_export_refuses_and_destroys_nothing(aws):
    path, backend, fake = aws
    fake.outcome = "FAILED"
    _refused(
        _down(path),
        backend,
        "llm-p5",
        FS_ID,
        "/fsx/data -> s3://ml-team-ckpt/llm-p5",
        "task-0123456789abcdef0 FAILED",
        "2 failed",
        "Access Denied",
        "nothing was destroyed",
        "--discard-checkpoints",
    )


def test_an_export_past_the_timeout_refuses_and_destroys_nothing(aws, clock):
    path, backend, fake = aws
    fake.outcome = None  # the task never ends
    result = _down(path, "--export-timeout", "60")
    _refused(result, backend, "llm-p5", "still EXECUTING after 60 s", "--export-timeout")
    assert clock.now == 1060.0  # it waited exactly the timeout


def test_a_missing_association_refuses(aws):
    path, backend, fake = aws
    fake.associations = []
    _refused(_down(path), backend, "llm-p5", "no data repository association", "s3://ml-team-ckpt/llm-p5")
    assert not fake.named("CreateDataRepositoryTask")


def test_an_fsx_api_error_refuses_with_the_permissions(aws, monkeypatch):
    path, backend, fake = aws

    def no_credentials(**kwargs: Any) -> dict[str, Any]:
        raise NoCredentialsError()

    monkeypatch.setattr(fake, "describe_file_systems", no_credentials)
    _refused(_down(path), backend, "llm-p5", "Unable to locate credentials", "fsx:CreateDataRepositoryTask")


def test_discard_checkpoints_destroys_without_exporting(aws):
    path, backend, fake = aws
    result = _down(path, "--discard-checkpoints")
    assert result.exit_code == 0, result.output
    assert not fake.named("CreateDataRepositoryTask") and backend.destroyed
    assert "skipped (--discard-checkpoints)" in " ".join(result.output.split())


def test_discard_checkpoints_cancels_a_running_task_that_would_stop_the_delete(aws, clock):
    """FSx deletes no file system while a data repository task on it is PENDING or EXECUTING."""
    path, backend, fake = aws
    fake.running()
    result = _down(path, "--discard-checkpoints", "--json")
    assert result.exit_code == 0, result.output
    assert fake.named("CancelDataRepositoryTask") == [{"TaskId": "task-0aaaaaaaaaaaaaaa0"}]
    assert fake.other is not None and fake.other["Lifecycle"] == "CANCELED" and backend.destroyed
    assert not fake.named("CreateDataRepositoryTask") and clock.now == 1015.0  # one wait while CANCELING
    assert (
        "canceled data repository task task-0aaaaaaaaaaaaaaa0" in json.loads(result.stdout)["durable_copy"][1]
    )


def test_down_help_names_the_flags():
    text = " ".join(CliRunner().invoke(app, ["down", "--help"], terminal_width=200).output.split())
    assert "--discard-checkpoints" in text and "--export-timeout" in text and "destroys nothing" in text


@pytest.fixture
def gcp(tmp_path, monkeypatch, clock):
    path, backend = _cluster(tmp_path, monkeypatch, "gcp-a3-mega.yaml", _with_gcs)
    return path, backend


def _lustre(monkeypatch, fake: FakeLustre) -> None:
    monkeypatch.setattr(lustre_export, "session_http", lambda: fake)


def test_managed_lustre_export_is_waited_for(gcp, monkeypatch, clock):
    path, backend = gcp
    fake = FakeLustre()
    _lustre(monkeypatch, fake)
    result = _down(path, "--json")
    assert result.exit_code == 0, result.output
    post = [c for c in fake.calls if c[0] == "POST"]
    assert post[0][1] == (
        "https://lustre.googleapis.com/v1/projects/my-gpu-project/locations/"
        f"{load_spec(path).provider.zone}/instances/a3mega-lustre:exportData"
    )
    body = post[0][2]
    assert body is not None and body["lustrePath"] == {"path": "/"}
    assert body["gcsPath"] == {"uri": "gs://ml-team-ckpt/a3mega/"}  # the folder ends with '/'
    assert fake.polls == 2 and clock.now == 1030.0 and backend.destroyed
    assert "12 of 12 object(s) copied" in json.loads(result.stdout)["durable_copy"][0]


def test_a_failed_managed_lustre_export_refuses(gcp, monkeypatch):
    path, backend = gcp
    _lustre(monkeypatch, FakeLustre(error={"code": 7, "message": "caller lacks storage.objects.create"}))
    _refused(
        _down(path),
        backend,
        "a3mega",
        "a3mega-lustre",
        "gs://ml-team-ckpt/a3mega/",
        "code 7",
        "storage.objects.create",
        "PERMISSION_DENIED",
        "--discard-checkpoints",
    )


def test_a_managed_lustre_export_past_the_timeout_refuses(gcp, monkeypatch, clock):
    path, backend = gcp
    _lustre(monkeypatch, FakeLustre(steps=10**6))
    _refused(_down(path, "--export-timeout", "30"), backend, "a3mega", "still running after 30 s")


def _no_cloud(monkeypatch) -> None:
    def called(*args: Any) -> None:
        raise AssertionError("a filesystem without a durable copy needs no cloud call")

    monkeypatch.setattr(fsx_export, "fsx_client", called)
    monkeypatch.setattr(lustre_export, "session_http", called)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_the_local_volume_is_untouched(tmp_path, monkeypatch, checkpoint):
    """No export and no cloud call; with a checkpoint plan, a warning that the checkpoints go with it."""
    _no_cloud(monkeypatch)

    def change(data: dict[str, Any]) -> None:
        if checkpoint:
            data["checkpoint"] = {"parameters": "125M"}

    path, backend = _cluster(tmp_path, monkeypatch, "local.yaml", change)
    result = _down(path, "--json")
    assert result.exit_code == 0, result.output
    lines = json.loads(result.stdout)["durable_copy"]
    if checkpoint:
        assert len(lines) == 1 and "volume filesystem at /shared has no durable copy" in lines[0], lines
    else:
        assert lines == []
    assert backend.destroyed


def test_fsx_without_a_data_repository_warns_about_checkpoints(tmp_path, monkeypatch):
    _no_cloud(monkeypatch)

    def change(data: dict[str, Any]) -> None:
        data["checkpoint"] = {"parameters": "7B"}

    path, backend = _cluster(tmp_path, monkeypatch, "aws-p5.yaml", change)
    result = _down(path)
    assert result.exit_code == 0, result.output
    assert "fsx_lustre filesystem at /fsx has no durable copy" in " ".join(result.output.split())
    assert backend.destroyed


def test_every_filesystem_kind_with_a_durable_copy_has_an_exporter_and_no_other() -> None:
    """The spec says which kinds can keep a durable copy (``spec.durable``, read by preflight); infra says
    which module exports each: the same kinds."""
    from gpufleet.infra.durable import EXPORTERS
    from gpufleet.spec.durable import WITH_A_DURABLE_COPY

    assert set(EXPORTERS) == set(WITH_A_DURABLE_COPY)
