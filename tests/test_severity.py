"""One severity type for preflight findings and validation checks, each stage keeping its own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.preflight import Finding
from gpufleet.severity import CHECK_STATUSES, FINDING_LEVELS, Severity
from gpufleet.validate.gate import FAIL, PASS, WARN, Check


def test_both_stages_use_the_one_type():
    assert {FAIL, PASS, WARN} <= set(CHECK_STATUSES)
    finding = Finding(Severity.ERROR, "c", "p", "m")
    check = Check("c", FAIL, "m")
    assert isinstance(finding.level, Severity) and isinstance(check.status, Severity)
    assert finding.level.rank == check.status.rank == 2
    assert finding.level.is_failure and check.status.is_failure


@pytest.mark.parametrize(
    ("finding", "check"),
    [(Severity.ERROR, Severity.FAIL), (Severity.WARNING, Severity.WARN), (Severity.INFO, Severity.INFO)],
)
def test_each_finding_level_weighs_as_its_check_status(finding, check):
    assert finding.rank == check.rank


def test_ranks_order_the_scale():
    order = sorted(Severity, key=lambda s: s.rank)
    assert order[0] is Severity.PASS and {order[-1], order[-2]} == {Severity.ERROR, Severity.FAIL}


def test_words_are_the_ones_each_stage_printed():
    assert [level.value for level in FINDING_LEVELS] == ["error", "warning", "info"]
    assert sorted(status.value for status in CHECK_STATUSES) == ["fail", "info", "pass", "warn"]
    assert Check("c", FAIL, "m").to_json() == {"name": "c", "status": "fail", "message": "m"}
    assert Finding(Severity.WARNING, "c", "p", "m").to_json()["level"] == "warning"


def test_check_reads_a_status_word_and_refuses_a_finding_level():
    assert Check("c", "warn", "m").status is Severity.WARN  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass, fail, warn or info, not error"):
        Check("c", Severity.ERROR, "m")


def test_a_preflight_check_cannot_yield_a_check_status(monkeypatch):
    """A finding spelled as a validation status (fail) would slip past errors() and the exit code."""
    import gpufleet.preflight.base as base
    from gpufleet.spec import parse_spec

    spec = parse_spec(
        (Path(__file__).resolve().parents[1] / "examples" / "local.yaml").read_text(encoding="utf-8")
    )
    stray = base.RegisteredCheck(
        "stray", frozenset({"local"}), lambda s, c: [Finding(FAIL, "stray", "p", "m")]
    )
    monkeypatch.setattr(base, "registered_checks", lambda: [stray])
    with pytest.raises(ValueError, match="error, warning or info, not fail"):
        base.run_checks(spec)
