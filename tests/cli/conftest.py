"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials and no Pulumi CLI: what ``gpufleet plan`` must not need."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "PULUMI_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("COLUMNS", "250")
