"""``gpufleet plan`` with a spec's ``checkpoint`` block: the checkpoint's size and write time at the FSx file
system's provisioned throughput, in the text and in ``--json`` (offline, as test_plan_cmd.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("offline")


def p5_with_checkpoint(tmp_path: Path, checkpoint: dict | None) -> str:
    """examples/aws-p5.yaml (2 p5 nodes, FSx PERSISTENT_2 of 2,400 GiB at 250 MB/s per TiB)."""
    data = yaml.safe_load((ROOT / "examples" / "aws-p5.yaml").read_text())
    if checkpoint is not None:
        data["checkpoint"] = checkpoint
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_plan_json_gives_the_checkpoint_figures(tmp_path):
    spec = p5_with_checkpoint(tmp_path, {"parameters": "8B", "interval": "30m"})
    result = runner.invoke(app, ["plan", spec, "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)["checkpoint"]
    throughput = 2400 / 1024 * 250  # 585.9 MB/s
    assert figures["bytes"] == 8 * 10**9 * 14
    assert figures["throughput_mb_s"] == pytest.approx(throughput)
    assert figures["write_s"] == pytest.approx(112e9 / (throughput * 1e6))  # 191.1 s
    assert figures["overhead"] == pytest.approx(112e9 / (throughput * 1e6) / 1800)  # 10.6 %
    assert figures["needed_bytes"] == 3 * 112 * 10**9
    assert figures["capacity_bytes"] == 2400 << 30


def test_plan_text_says_the_write_time_and_warns_on_the_overhead(tmp_path):
    result = runner.invoke(
        app, ["plan", p5_with_checkpoint(tmp_path, {"parameters": "8B", "interval": "30m"})]
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "checkpoint: a checkpoint is 112.0 GB" in out and "it writes in 3.2 min at 586 MB/s" in out, out
    assert "checkpoint warning: writing a checkpoint (3.2 min) takes 11% of the 30.0 min interval" in out, out


def test_plan_without_a_checkpoint_block_says_nothing_of_it(tmp_path):
    spec = p5_with_checkpoint(tmp_path, None)
    assert json.loads(runner.invoke(app, ["plan", spec, "--json"]).output)["checkpoint"] is None
    assert "checkpoint" not in runner.invoke(app, ["plan", spec]).output
