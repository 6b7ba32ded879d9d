"""Derived resource names against their limits, and against the names the Pulumi program really makes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.preflight.names import derived_names, resource_names
from gpufleet.spec import load_spec
from gpufleet.spec.load import parse_spec

ROOT = Path(__file__).resolve().parents[2]
LONG = Path(__file__).resolve().parents[1] / "cli" / "bad_specs" / "gcp-long-names.yaml"
GCE_LIMIT = 63


def _planned_names(spec, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The GCE names the program registers (its own preflight guard lifted, and the mocks' refusal of a
    name Compute refuses, to see every name it would make)."""
    from gpufleet.infra import program

    monkeypatch.setattr("gpufleet.infra.gcp.component.require_no_errors", lambda spec: None)
    monkeypatch.setattr("gpufleet.infra.gcp.mocks.COMPUTE_NAME", re.compile(".*"))
    plan = program.plan_spec(spec, datetime(2026, 11, 23, tzinfo=UTC))
    names = {}
    for resource in plan.resources:
        name = resource.inputs.get("name") or resource.inputs.get("instanceId")
        if isinstance(name, str) and resource.type.startswith("gcp:"):
            names[name] = resource.type
    return names


def test_every_gce_name_the_program_makes_over_the_limit_is_reported(monkeypatch) -> None:
    spec = load_spec(LONG)
    planned = _planned_names(spec, monkeypatch)
    too_long = {name: kind for name, kind in planned.items() if len(name) > GCE_LIMIT}
    assert too_long, "the long-name spec no longer makes a name over the limit: update the test data"
    findings = list(resource_names(spec, load_catalog()))
    reported = " ".join(f.message for f in findings)
    for name, kind in too_long.items():
        assert f"'{name}'" in reported, f"{kind} {name} ({len(name)} chars) is not reported: {reported}"


def test_without_preflight_the_program_fails_where_compute_would(monkeypatch) -> None:
    """What the name check spares users: the first too-long name stops ``up`` at Compute's 400."""
    from gpufleet.infra import program

    monkeypatch.setattr("gpufleet.infra.gcp.component.require_no_errors", lambda spec: None)
    with pytest.raises(Exception, match=r"Invalid value for field 'resource\.name'"):
        program.plan_spec(load_spec(LONG), datetime(2026, 11, 23, tzinfo=UTC))


def test_the_names_listed_cover_every_name_that_grows_with_the_group_name(monkeypatch) -> None:
    spec = load_spec(LONG)
    listed = {d.name for d in derived_names(spec)}
    group = spec.node_groups[1].name
    grown = {name for name in _planned_names(spec, monkeypatch) if group in name}
    assert grown <= listed, f"derived_names misses {sorted(grown - listed)}"


@pytest.mark.parametrize("example", ["gcp-a3-mega.yaml", "gcp-a3-ultra.yaml", "aws-p5.yaml", "local.yaml"])
def test_the_examples_have_no_name_problem(example: str) -> None:
    spec = load_spec(ROOT / "examples" / example)
    assert list(resource_names(spec, load_catalog())) == []


@pytest.mark.parametrize(
    ("cluster", "group", "count", "problem"),
    [
        ("a" * 24, "b" * 32, 2, None),  # local: host names reach 59 characters, below 63
        ("a" * 24, "b" * 32, 4096, None),  # 4-digit index: 62 characters
    ],
)
def test_local_host_names_at_the_longest(cluster: str, group: str, count: int, problem: str | None) -> None:
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["name"], data["node_groups"][1]["name"], data["node_groups"][1]["count"] = cluster, group, count
    spec = parse_spec(yaml.safe_dump(data))
    assert max(len(d.name) for d in derived_names(spec)) <= GCE_LIMIT
    assert [f.message for f in resource_names(spec, load_catalog())] == ([] if problem is None else [problem])
