"""``gpufleet image`` through the console entry point: what a cloud spec gets, and the sub-commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app, main

ROOT = Path(__file__).resolve().parents[2]


def test_image_lists_its_commands() -> None:
    result = CliRunner().invoke(app, ["image", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("build", "list", "delete"):
        assert command in result.output


@pytest.mark.parametrize("example", ["aws-p5.yaml", "gcp-a3-mega.yaml"])
def test_build_for_a_cloud_spec_exits_3_and_says_why(
    example: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["gpufleet", "image", "build", str(ROOT / "examples" / example)])
    with pytest.raises(SystemExit) as exited:
        main()
    output = " ".join((capsys.readouterr().err).split())
    assert exited.value.code == 3, output
    assert "builds images for the local provider" in output and "not built by gpufleet yet" in output
    assert "Traceback" not in output
