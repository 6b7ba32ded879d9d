"""``gpufleet image`` through the console entry point: what a cloud spec gets, and the sub-commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app, main

ROOT = Path(__file__).resolve().parents[2]


def test_image_lists_its_commands() -> None:
    result = CliRunner().invoke(app, ["image", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("build", "list", "delete"):
        assert command in result.output


def run_main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr("sys.argv", ["gpufleet", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    return exited.value.code, captured.out, " ".join(captured.err.split())


def with_cidrs(example: str, tmp_path: Path) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / example).read_text(encoding="utf-8"))
    spec["access"] = {**(spec.get("access") or {}), "allowed_cidrs": ["203.0.113.0/24"]}
    path = tmp_path / example
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


@pytest.mark.parametrize("example", ["aws-p5.yaml", "gcp-a3-mega.yaml"])
def test_build_for_a_cloud_spec_without_allowed_cidrs_exits_3_and_says_why(
    example: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(["image", "build", str(ROOT / "examples" / example)], monkeypatch, capsys)
    assert code == 3, err
    assert "access.allowed_cidrs" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("example", "builder", "image"),
    [
        ("aws-p5.yaml", "aws:ec2/instance:Instance", "aws:ec2/amiFromInstance:AmiFromInstance"),
        ("gcp-a3-mega.yaml", "gcp:compute/instance:Instance", "gcp:compute/image:Image"),
    ],
)
def test_build_plan_shows_the_builder_stack_offline(
    example: str,
    builder: str,
    image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_main(
        ["image", "build", "--plan", "--json", str(with_cidrs(example, tmp_path))], monkeypatch, capsys
    )
    assert code == 0, err
    counts = json.loads(out)["counts"]
    assert counts.get(builder) == 1 and counts.get(image) == 1, counts


def test_build_without_the_pulumi_cli_exits_8_before_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "no-pulumi-home"))
    code, _, err = run_main(["image", "build", str(with_cidrs("aws-p5.yaml", tmp_path))], monkeypatch, capsys)
    assert code == 8, err
    assert "Pulumi CLI is missing" in err and "Traceback" not in err, err


def test_cloud_list_without_credentials_exits_8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for variable in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("CLOUDSDK_AUTH_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    code, _, err = run_main(
        ["image", "list", "--spec", str(ROOT / "examples" / "gcp-a3-mega.yaml")], monkeypatch, capsys
    )
    assert code == 8, err
    assert "no Google Cloud credentials" in err, err


def test_plan_of_a_local_spec_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_main(
        ["image", "build", "--plan", str(ROOT / "examples" / "local.yaml")], monkeypatch, capsys
    )
    assert code == 3, err
    assert "podman node" in err, err
