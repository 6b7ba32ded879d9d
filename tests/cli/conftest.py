"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpufleet.cli import common


@pytest.fixture(autouse=True)
def _wide_consoles(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's consoles are made once, at import, and take their width from COLUMNS then: which test
    imported them first decided the width for every later one (under pytest-xdist the order changed and
    tables wrapped the words the tests look for). Every CLI test gets 250 columns."""
    for console in (common.console, common.err_console):
        monkeypatch.setattr(console, "_width", 250)
    yield


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials and no Pulumi CLI: what ``gpufleet plan`` must not need."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "PULUMI_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("COLUMNS", "250")
