"""``gpufleet down`` archives Azure Managed Lustre to its Blob container before anything is destroyed."""

from __future__ import annotations

import pytest
from azure_testlib import SUBSCRIPTION, azure_spec
from fake_arm import FakeArm

from gpufleet.infra.azure.lustre_export import archive
from gpufleet.infra.durable import ExportRefused, Wait, exporter_for
from gpufleet.progress import Reporter
from gpufleet.spec.model import AzureLustreFilesystem

LUSTRE = {
    "kind": "azure_lustre",
    "size_tib": 8,
    "data_repository": {
        "storage_account_id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/data/providers/"
        "Microsoft.Storage/storageAccounts/ckpts",
        "container": "checkpoints",
    },
}


class Quiet(Reporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def fs() -> AzureLustreFilesystem:
    spec = azure_spec(filesystem=LUSTRE)
    assert isinstance(spec.filesystem, AzureLustreFilesystem)
    return spec.filesystem


def wait(timeout_s: float = 60.0) -> Wait:
    now = [0.0]
    return Wait(timeout_s, poll_s=15.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))


def filesystem(previous: str | None = None) -> dict:
    status = (
        [{"filesystemPath": "/", "status": {"state": "Completed", "lastCompletionTime": previous}}]
        if previous
        else []
    )
    return {"id": "x", "name": "t1-lustre", "properties": {"hsm": {"settings": {}, "archiveStatus": status}}}


def test_the_exporter_of_azure_lustre_is_the_archive():
    spec = azure_spec(filesystem=LUSTRE)
    exporter = exporter_for(spec)
    assert exporter is not None and exporter.__name__ == "gpufleet.infra.azure.lustre_export"


def test_archive_posts_the_path_and_waits_for_a_new_completion():
    arm = FakeArm(
        filesystem=filesystem(previous="2026-11-26T08:00:00Z"),
        statuses=[
            {"state": "Completed", "lastCompletionTime": "2026-11-26T08:00:00Z"},  # the last one, still shown
            {"state": "InProgress", "percentComplete": 40},
            {"state": "Completed", "percentComplete": 100, "lastCompletionTime": "2026-11-27T10:05:00Z"},
        ],
    )
    lines = archive("t1", fs(), SUBSCRIPTION, wait(), Quiet(), http=arm)
    posts = [(url, body) for method, url, body in arm.calls if method == "POST"]
    assert len(posts) == 1 and posts[0][0].endswith(
        "/amlFilesystems/t1-lustre/archive?api-version=2024-03-01"
    )
    assert posts[0][1] == {"filesystemPath": "/"}
    assert "/resourceGroups/gpufleet-t1/providers/Microsoft.StorageCache/" in posts[0][0]
    assert lines == [
        "archived Managed Lustre t1-lustre (/lustre/ -> https://ckpts.blob.core.windows.net/checkpoints): "
        "completed 2026-11-27T10:05:00Z"
    ]


def test_a_failed_archive_refuses_the_teardown_with_azures_error():
    arm = FakeArm(
        filesystem=filesystem(),
        statuses=[{"state": "Failed", "errorCode": "ContainerAccessDenied", "errorMessage": "no SAS"}],
    )
    with pytest.raises(ExportRefused) as refused:
        archive("t1", fs(), SUBSCRIPTION, wait(), Quiet(), http=arm)
    assert "ended Failed (ContainerAccessDenied: no SAS)" in refused.value.message
    assert "nothing was destroyed" in refused.value.message and "HPC Cache Resource Provider" in (
        refused.value.hint or ""
    )


def test_an_archive_that_outlasts_the_timeout_refuses():
    arm = FakeArm(filesystem=filesystem(), statuses=[{"state": "InProgress", "percentComplete": 10}] * 10)
    with pytest.raises(ExportRefused) as refused:
        archive("t1", fs(), SUBSCRIPTION, wait(timeout_s=30), Quiet(), http=arm)
    assert "still running after 30 s" in refused.value.message and "--export-timeout" in (
        refused.value.hint or ""
    )


def test_no_file_system_means_nothing_to_archive():
    assert archive("t1", fs(), SUBSCRIPTION, wait(), Quiet(), http=FakeArm()) == [
        "no Managed Lustre file system t1-lustre: nothing to archive"
    ]
