"""``gpufleet check`` through Typer's test runner: exit codes and what the user reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app, main

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_check_ok_on_the_local_example() -> None:
    result = runner.invoke(app, ["check", str(ROOT / "examples" / "local.yaml")])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output


def test_check_json_is_parseable() -> None:
    result = runner.invoke(app, ["check", "--json", str(ROOT / "examples" / "local.yaml")])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is True
    assert isinstance(document["findings"], list)


def test_check_exits_1_on_a_preflight_error(tmp_path: Path) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["node_groups"][1]["count"] = 30
    result = runner.invoke(app, ["check", "--json", str(write(tmp_path, spec))])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["ok"] is False
    assert any(f["check"] == "local_fits_host" and f["level"] == "error" for f in document["findings"])


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr("sys.argv", ["gpufleet", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out + captured.err


def test_invalid_spec_exits_3_with_the_field_and_no_traceback(tmp_path, monkeypatch, capsys) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["fabric"] = "efa"
    code, output = run_main(monkeypatch, capsys, "check", str(write(tmp_path, spec)))
    assert code == 3, output
    assert "fabric.kind" in output and "set fabric: ethernet" in output
    assert "Traceback" not in output


def test_missing_spec_exits_3(tmp_path, monkeypatch, capsys) -> None:
    code, output = run_main(monkeypatch, capsys, "check", str(tmp_path / "nope.yaml"))
    assert code == 3, output
    assert "does not exist" in output


def test_unknown_command_is_a_usage_error(monkeypatch, capsys) -> None:
    code, output = run_main(monkeypatch, capsys, "chek")
    assert code == 2, output


def test_status_of_a_cluster_that_is_not_up(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = yaml.safe_load((ROOT / "examples" / "baremetal.yaml").read_text())
    spec["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
    monkeypatch.setattr("sys.argv", ["gpufleet", "status", "--json", str(write(tmp_path, spec))])
    with pytest.raises(SystemExit) as exited:
        main()
    captured = capsys.readouterr()
    # issue 12: a cluster that never existed is exit 7 on every provider, said in the JSON document too
    assert exited.value.code == 7, captured.out + captured.err
    error = json.loads(captured.out)["error"]
    assert error["kind"] == "state" and "no cluster named 'lab'" in error["message"]


def test_configure_before_up_says_what_to_do(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    code, output = run_main(monkeypatch, capsys, "configure", str(ROOT / "examples" / "local.yaml"))
    assert code == 7, output
    assert "gpufleet up" in output
