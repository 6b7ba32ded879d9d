"""Report files (JSON, Markdown, PNG) and ``gpufleet report`` through Typer's test runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app, main
from gpufleet.validate.gate import GateConfig, judge_all
from gpufleet.validate.nccl_log import parse_log
from gpufleet.validate.report import JSON_NAME, MARKDOWN_NAME, PLOT_NAME, write_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
DATA = Path(__file__).resolve().parent / "data"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


def _log(number: str) -> str:
    (path,) = FIXTURES.glob(f"{number}-*.log")
    return str(path)


def test_write_report_files(tmp_path):
    tests = parse_log(_log("06")) + parse_log(_log("14")) + parse_log(_log("07"))
    config = GateConfig(min_busbw={"reduce_scatter": 300.0, "all_reduce": 30.0})
    verdicts = judge_all(tests, config)
    files = write_report(tmp_path, tests, verdicts, gate_min_bytes=config.gate_min_bytes)
    assert (files.json.name, files.markdown.name, files.plot.name) == (JSON_NAME, MARKDOWN_NAME, PLOT_NAME)
    document = json.loads(files.json.read_text())
    assert document["passed"] is False
    assert [t["collective"] for t in document["tests"]] == ["reduce_scatter", "all_reduce", "all_reduce"]
    assert [t["verdict"]["passed"] for t in document["tests"]] == [True, True, False]
    assert document["plot"] == PLOT_NAME
    markdown = files.markdown.read_text()
    assert "**Overall: FAIL**" in markdown
    row = "| reduce_scatter | PASS | 362.55 GB/s at 8G | 300 GB/s (floor) | floor 300 GB/s | 223.3 GB/s |"
    assert row in markdown
    assert f"![bus bandwidth against message size]({PLOT_NAME})" in markdown
    assert "- [FAIL] wrong: #wrong > 0 in 6 rows" in markdown
    png = files.plot.read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 20_000


def test_report_without_rows_has_no_plot(tmp_path):
    tests = parse_log(_log("20"))
    files = write_report(tmp_path, tests, judge_all(tests, GateConfig()))
    assert files.plot is None and not (tmp_path / PLOT_NAME).exists()
    assert "the run failed" in files.markdown.read_text()


# ---- the CLI --------------------------------------------------------------------------------------

KEYS = {
    "file",
    "collective",
    "ranks",
    "hosts",
    "transport",
    "avg_busbw",
    "out_of_bounds",
    "wrong_total",
    "rows",
}


def test_cli_json_shape():
    result = runner.invoke(app, ["report", "--json", _log("05")])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    (test,) = document["tests"]
    assert KEYS | {"verdict"} <= set(test)
    assert test["collective"] == "sendrecv" and test["ranks"] == 2 and len(test["hosts"]) == 2
    row = test["rows"][0]
    assert set(row) == {"size", "count", "type", "redop", "root", "oop", "ip"}
    assert row["oop"] == {"time_us": 838.43, "algbw": 40.02, "busbw": 40.02, "wrong": 0}
    assert row["ip"]["wrong"] is None  # N/A in the log
    assert test["verdict"]["mode"] == "correctness-only"


def test_cli_exit_1_when_a_gate_fails():
    result = runner.invoke(app, ["report", _log("03"), _log("05")])
    assert result.exit_code == 1, result.output
    assert "4 out-of-bounds values" in result.output
    assert "FAIL: 1 of 2 test(s) passed" in result.output


def test_cli_baseline_options_and_out_dir(tmp_path):
    args = ["report", "--json", "--instance-type", "p5.48xlarge", "--nodes", "2", "--fabric", "efa"]
    result = runner.invoke(
        app, [*args, "--margin", "0.5", "--out", str(tmp_path), str(DATA / "synthetic-all_reduce-2x8-J.json")]
    )
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)["tests"][0]["verdict"]
    assert verdict["mode"] == "baseline" and verdict["margin"] == 0.5
    assert verdict["measured"]["size"] == 4 << 30
    assert (tmp_path / JSON_NAME).exists() and (tmp_path / PLOT_NAME).exists()


def test_cli_min_busbw_and_collective_for_unnamed_logs():
    args = ["report", "--json", "--collective", "scatter", "--min-busbw", "scatter=80", _log("09")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.output)["tests"][0]["verdict"]
    assert verdict["collective"] == "scatter" and verdict["floor"] == 80.0
    assert verdict["measured"] == {"busbw": 79.2, "size": 2 << 30, "half": "out-of-place"}


@pytest.mark.parametrize("bad", ["all_reduce", "all_reduce=-1", "nonsense=3", "all_reduce=fast"])
def test_cli_rejects_bad_floor(bad):
    result = runner.invoke(app, ["report", "--min-busbw", bad, _log("05")])
    assert result.exit_code == 2
    assert "COLLECTIVE=GBPS" in result.output


def test_cli_reads_a_pasted_log_from_stdin():
    text = Path(_log("08")).read_text()
    result = runner.invoke(app, ["report", "--json", "-"], input=text)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["tests"][0]["file"] == "<stdin>"


def test_unreadable_log_exits_6_with_file_and_line(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("this is not an nccl-tests log\n")
    monkeypatch.setattr(sys, "argv", ["gpufleet", "report", str(bad)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 6
    err = capsys.readouterr().err
    assert "notes.txt: line 1 (end of file): no nccl-tests result table found" in err
    assert "To fix:" in err
