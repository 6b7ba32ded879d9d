"""Expired clusters are torn down, live ones are kept, and nothing is touched on a dry run."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.lifecycle.reap import expired_states, reap
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def made(tmp_path, monkeypatch):
    """Two bare-metal clusters 'made' on this machine: 'old' (expired) and 'new' (still alive)."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    paths = {}
    for name, on_expiry in (("old", "destroy"), ("new", "destroy"), ("kept", "warn")):
        data = yaml.safe_load((ROOT / "examples" / "baremetal.yaml").read_text())
        data["name"] = name
        data["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
        data["lifetime"] = {"ttl": "1h", "on_expiry": on_expiry}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        state = ClusterState.for_name(name)
        state.begin(load_spec(path), path)
        paths[name] = path
    for name in ("old", "kept"):  # made two hours ago
        state = ClusterState.for_name(name)
        two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
        state.update(
            created_at=two_hours_ago.isoformat(), expires_at=(two_hours_ago + timedelta(hours=1)).isoformat()
        )
    return paths


def test_only_expired_clusters_are_found(made) -> None:
    assert sorted(state.name for state, _ in expired_states()) == ["kept", "old"]


def test_dry_run_touches_nothing(made) -> None:
    calls = []
    items = reap(lambda spec, state: calls.append(spec.name) or [], dry_run=True)
    assert {i.cluster: i.action for i in items} == {
        "old": "would destroy",
        "kept": "kept (lifetime.on_expiry: warn)",
    }
    assert calls == []
    assert ClusterState.for_name("old").exists()


def test_reap_tears_down_the_expired_one_only(made) -> None:
    result = CliRunner().invoke(app, ["reap", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    actions = {item["cluster"]: item["action"] for item in document["local"]}
    assert actions == {"old": "destroyed", "kept": "kept (lifetime.on_expiry: warn)"}
    assert not ClusterState.for_name("old").exists()
    assert ClusterState.for_name("new").exists() and ClusterState.for_name("kept").exists()


def test_a_failed_teardown_exits_1(made, monkeypatch) -> None:
    from gpufleet.errors import ProvisionError
    from gpufleet.lifecycle import teardown

    def broken(spec, state, reporter, durable=None):
        raise ProvisionError("the cloud said no")

    monkeypatch.setattr(teardown, "down", broken)
    result = CliRunner().invoke(app, ["reap", "--json"])
    assert result.exit_code == 1, result.output
    assert "failed: the cloud said no" in result.stdout


def test_reap_lists_expired_gcp_clusters_by_their_labels(made, monkeypatch) -> None:
    from gpufleet.infra.gcp import leftovers
    from gpufleet.infra.leftovers import ExpiredCluster

    when = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    monkeypatch.setattr(
        leftovers, "find_expired", lambda project: [ExpiredCluster("ci-run", when, 3, "0123456789ab")]
    )
    result = CliRunner().invoke(app, ["reap", "--dry-run", "--json", "--gcp-project", "my-proj-1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gcp"] == [
        {
            "project": "my-proj-1",
            "cluster": "ci-run",
            "cluster_id": "0123456789ab",
            "expires_at": when.isoformat(),
            "resources": 3,
        }
    ]
