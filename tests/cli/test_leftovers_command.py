"""``gpufleet leftovers SPEC``: the leftover check from a spec alone (after a ``pulumi destroy`` in CI),
waiting out the listing APIs' lag; exit 9 only for what stays listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.infra import leftovers as leftovers_module
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.leftovers import Leftover

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "examples" / "aws-p5.yaml")
VM = Leftover("ec2 instance", "i-0123456789abcdef0", "shutting-down")


@pytest.fixture
def reads(monkeypatch):
    """The AWS finder answers these reads in order (the last repeats); no sleeping, no credentials."""
    answers: list[list[Leftover]] = []
    aws = type(pulumi_backend_of("aws"))
    monkeypatch.setattr(aws, "check_credentials", lambda self, spec: None)
    monkeypatch.setattr(
        aws, "find_leftovers", lambda self, spec: answers.pop(0) if len(answers) > 1 else answers[0]
    )
    monkeypatch.setattr(leftovers_module.time, "sleep", lambda seconds: None)
    return answers


def test_a_resource_listed_by_the_first_read_only_is_not_a_leftover(reads):
    reads.extend([[VM], []])
    result = CliRunner().invoke(app, ["leftovers", SPEC, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["cluster"], document["reads"], document["leftovers"]) == ("llm-p5", 2, []), document


def test_what_stays_listed_exits_9_and_says_for_how_long(reads):
    reads.extend([[VM]])
    result = CliRunner().invoke(app, ["leftovers", SPEC, "--json", "--interval", "15"])
    assert result.exit_code == 9, result.output
    (left,) = json.loads(result.stdout)["leftovers"]
    assert (left["id"], left["reads"]) == ("i-0123456789abcdef0", 2), left


def test_a_provider_without_a_cloud_is_refused():
    result = CliRunner().invoke(
        app, ["leftovers", str(ROOT / "examples" / "local.yaml")], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    assert "only the clouds" in result.output
