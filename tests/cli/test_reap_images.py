"""``gpufleet reap --prune-images`` through the CLI, with the cloud's image calls replaced by a fake."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ProvisionError
from gpufleet.infra.images import CloudImage

runner = CliRunner()


def image(name: str, created: str, used_by: tuple[str, ...] = ()) -> CloudImage:
    return CloudImage(name, name, name * 8, "ubuntu-22.04", created, used_by=used_by)


class FakeCloud:
    expiry_scope = "region"

    def __init__(self) -> None:
        self.baked = [
            image("ami-4", "2026-11-04"),
            image("ami-3", "2026-11-03"),
            image("ami-2", "2026-11-02", used_by=("train",)),
            image("ami-1", "2026-11-01"),
            image("ami-0", "2026-10-31"),
        ]
        self.deleted: list[str] = []
        self.listed = 0

    @property
    def images(self) -> FakeCloud:
        """The cloud's ``BakeSource`` (``PulumiBackend.images``): the image calls below."""
        return self

    def find_expired(self, scope: str) -> list:
        return []

    def list_images(self, scope: str) -> list[CloudImage]:
        self.listed += 1
        return list(self.baked)

    def delete_image(self, scope: str, found: CloudImage) -> list[str]:
        if found.id == "ami-0":
            raise ProvisionError("UnauthorizedOperation: not allowed to deregister ami-0")
        self.deleted.append(found.id)
        return [f"ami {found.id}"]


@pytest.fixture
def cloud(monkeypatch, tmp_path) -> FakeCloud:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    fake = FakeCloud()
    monkeypatch.setattr("gpufleet.cli.reap.pulumi_backend_of", lambda kind: fake)
    return fake


def test_dry_run_lists_what_the_rule_lets_go_and_deletes_nothing(cloud):
    result = runner.invoke(
        app, ["reap", "--aws-region", "us-east-1", "--prune-images", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(i["id"], i["action"]) for i in report["images"]] == [
        ("ami-1", "would delete"),
        ("ami-0", "would delete"),
    ]
    assert cloud.deleted == []


def test_a_failed_delete_is_reported_and_the_exit_is_1(cloud):
    result = runner.invoke(
        app, ["reap", "--aws-region", "us-east-1", "--prune-images"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1, result.output
    assert cloud.deleted == ["ami-1"], cloud.deleted
    assert "failed: UnauthorizedOperation" in result.output and "Traceback" not in result.output, (
        result.output
    )


def test_without_the_flag_images_are_not_looked_at(cloud):
    result = runner.invoke(app, ["reap", "--aws-region", "us-east-1", "--json"])
    assert result.exit_code == 0, result.output
    assert "images" not in json.loads(result.stdout) and cloud.listed == 0, result.stdout
