"""The spec is the truth (issue 38, point 1): ``up`` records the spec's content; a later ``up`` of a spec that
differs shows and applies what changes in place and refuses the rest, or a spec from another file with the
cluster's name, unless ``--replace``; ``configure`` and ``validate`` stop on any difference but the run's own
settings, with the command that applies it.

The commands run through Typer's runner on bare-metal specs (``up`` reads the site's inventory and makes
nothing) and, for what needs a local cluster's rules, on the state record alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode, SpecDrift
from gpufleet.lifecycle import drift as cluster_drift
from gpufleet.progress import SilentReporter
from gpufleet.spec import drift
from gpufleet.spec.load import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def invoke(*args: str) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, [*args, "--json"], env={"COLUMNS": "2000"})
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


def write_spec(path: Path, **changes: Any) -> Path:
    """examples/baremetal.yaml named 'lab', with its inventory absolute, and ``changes`` (dotted keys)."""
    data = yaml.safe_load((ROOT / "examples" / "baremetal.yaml").read_text())
    data["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


# ---- what differs, and where it can change ---------------------------------------------------------------


def test_changes_are_named_by_dotted_path_and_node_groups_by_name() -> None:
    before = drift.recordable(load_spec(ROOT / "examples" / "local.yaml"))
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["provider"]["node_memory_mb"] = 2048
    data["filesystem"]["mount_point"] = "/data"
    data["node_groups"][1]["count"] = 3
    data["software"]["container_image"] = "nvcr.io#nvidia/pytorch:25.01-py3"
    data["validation"]["iterations"] = 3
    after = drift.recordable(load_spec_text(data))
    found = {str(change) for change in drift.changes(before, after)}
    assert found == {
        "provider.node_memory_mb: 1024 -> 2048",
        "filesystem.mount_point: /shared -> /data",
        "node_groups[compute].count: 2 -> 3",
        "software.container_image: (none) -> nvcr.io#nvidia/pytorch:25.01-py3",
        "validation.iterations: 10 -> 3",
    }
    in_place, remade = drift.split(drift.changes(before, after), ("access",))
    assert sorted(c.path for c in in_place) == ["software.container_image", "validation.iterations"]
    assert sorted(c.path for c in remade) == [
        "filesystem.mount_point",
        "node_groups[compute].count",
        "provider.node_memory_mb",
    ]
    assert drift.fingerprint(before) == drift.fingerprint(json.loads(json.dumps(before)))
    assert drift.fingerprint(before) != drift.fingerprint(after)


def load_spec_text(data: dict[str, Any]):  # type: ignore[no-untyped-def]
    from gpufleet.spec.load import parse_spec

    return parse_spec(yaml.safe_dump(data))


def test_a_local_cluster_refuses_what_needs_new_nodes(state_dir: Path, tmp_path: Path) -> None:
    """The issue's case: another spec with the same name silently rewrote a running cluster's settings."""
    made = load_spec(ROOT / "examples" / "local.yaml")
    state = ClusterState.for_name(made.name)
    state.begin(made, ROOT / "examples" / "local.yaml")
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["provider"]["node_memory_mb"] = 2048
    data["filesystem"]["mount_point"] = "/data"
    other = tmp_path / "other" / "local.yaml"
    other.parent.mkdir()
    other.write_text(yaml.safe_dump(data))
    before = state.state_file.read_text()
    with pytest.raises(SpecDrift) as refused:
        cluster_drift.check_up(load_spec(other), state, other, replace=False)
    message = str(refused.value)
    assert f"made from {(ROOT / 'examples' / 'local.yaml').resolve()}, not from {other}" in message
    assert "provider.node_memory_mb: 1024 -> 2048" in message
    assert "filesystem.mount_point: /shared -> /data" in message
    assert "gpufleet up --replace" in message
    assert state.state_file.read_text() == before  # nothing recorded from the refused spec
    # The same file edited the same way: refused too, naming what needs new nodes.
    with pytest.raises(SpecDrift) as same_file:
        cluster_drift.check_up(load_spec(other), state, None, replace=False)
    assert "cannot take these changes in place" in str(same_file.value)
    # With --replace the differences come back for up to act on: both need the nodes made again.
    found = cluster_drift.check_up(load_spec(other), state, other, replace=True)
    assert found is not None and sorted(c.path for c in found.remade) == [
        "filesystem.mount_point",
        "provider.node_memory_mb",
    ]
    assert found.recorded_spec() == made


def test_a_kubernetes_cluster_takes_what_up_surveys_again_and_refuses_another_namespace(
    state_dir: Path, tmp_path: Path
) -> None:
    """A handed-over Kubernetes cluster: up makes no node, so node counts and the pods' image change in place
    (the next survey and validate read them); another namespace is another cluster's objects."""
    path = ROOT / "examples" / "kubernetes-eks-p5.yaml"
    made = load_spec(path)
    state = ClusterState.for_name(made.name)
    state.begin(made, path)
    data = yaml.safe_load(path.read_text())
    data["node_groups"][0]["count"] = 4
    data["scheduler"]["kubernetes"]["image"] = "public.ecr.aws/hpc-cloud/nccl-tests:v2"
    grown = tmp_path / "grown.yaml"
    grown.write_text(yaml.safe_dump(data))
    found = cluster_drift.check_up(load_spec(grown), state, path, replace=False)
    assert found is not None and found.remade == []
    assert sorted(c.path for c in found.in_place) == ["node_groups[gpu].count", "scheduler.kubernetes.image"]
    data["scheduler"]["kubernetes"]["namespace"] = "elsewhere"
    grown.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecDrift) as refused:
        cluster_drift.check_up(load_spec(grown), state, path, replace=False)
    assert "scheduler.kubernetes.namespace: gpufleet -> elsewhere" in str(refused.value)


# ---- through the CLI -------------------------------------------------------------------------------------


def test_up_records_the_spec_and_shows_what_it_changes_in_place(state_dir: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "lab.yaml")
    code, out, err = invoke("up", str(spec))
    assert code == 0, err
    record = json.loads((state_dir / "lab" / "state.json").read_text())
    assert record["spec"]["fabric"] == {"kind": "infiniband", "interfaces": None}
    assert record["spec_sha256"] == drift.fingerprint(record["spec"])
    assert record["spec_path"] == str(spec.resolve())
    assert out["applied"] == []

    write_spec(spec, **{"lifetime.ttl": "4h", "software.cuda": "12.8"})
    code, out, err = invoke("up", str(spec))
    assert code == 0, err
    assert sorted(out["applied"]) == ["lifetime.ttl: 1d -> 4h", "software.cuda: 12.9 -> 12.8"], out
    record = json.loads((state_dir / "lab" / "state.json").read_text())
    assert record["spec"]["software"]["cuda"] == "12.8"


def test_up_refuses_another_inventory_and_another_file_unless_replace(
    state_dir: Path, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "lab.yaml")
    assert invoke("up", str(spec))[0] == 0
    other_inventory = tmp_path / "site.yml"
    other_inventory.write_text((ROOT / "inventories" / "examples" / "baremetal.yml").read_text())
    write_spec(spec, **{"provider.inventory": str(other_inventory)})
    code, out, _ = invoke("up", str(spec))
    assert code == ExitCode.STATE, out
    assert out["error"]["type"] == "SpecDrift"
    assert (
        f"provider.inventory: {ROOT}/inventories/examples/baremetal.yml -> {other_inventory}"
        in (out["error"]["message"])
    )
    assert "gpufleet up --replace SPEC" in out["error"]["hint"]

    # A spec from another file with the cluster's name: refused even where every change is in place.
    other = write_spec(tmp_path / "elsewhere" / "lab.yaml", **{"software.monitoring": False})
    code, out, _ = invoke("up", str(other))
    assert code == ExitCode.STATE, out
    assert f"not from {other}" in out["error"]["message"]
    assert "software.monitoring: true -> false" in out["error"]["message"]
    assert f"gpufleet up --replace {other}" in out["error"]["hint"]
    code, out, err = invoke("up", str(other), "--replace")
    assert code == 0, err
    assert json.loads((state_dir / "lab" / "state.json").read_text())["spec_path"] == str(other.resolve())


def test_configure_and_validate_stop_on_a_spec_the_cluster_was_not_brought_up_with(
    state_dir: Path, tmp_path: Path
) -> None:
    """The issue's case: configure of a spec with a container image added read the last up's inventory, ran
    211 s, changed nothing and exited 0."""
    spec = write_spec(tmp_path / "lab.yaml")
    assert invoke("up", str(spec))[0] == 0
    image = "nvcr.io#nvidia/pytorch:25.01-py3"
    changed = write_spec(tmp_path / "image.yaml", **{"software.container_image": image})
    for command in ("configure", "validate"):
        code, out, _ = invoke(command, str(changed))
        assert code == ExitCode.STATE, out
        error = out["error"]
        assert "software.container_image: (none) -> nvcr.io#nvidia/pytorch:25.01-py3" in error["message"]
        assert error["hint"].startswith("apply them with 'gpufleet up SPEC' (they change in place)"), error
    # The run's own settings may differ: another validation block is no drift.
    runs_only = write_spec(tmp_path / "strict.yaml", **{"validation.iterations": 3})
    state = ClusterState.for_name("lab")
    cluster_drift.require_same(load_spec(runs_only), state, "gpufleet validate")
    # A change that needs new machines names the command that makes them.
    fabric = write_spec(tmp_path / "fabric.yaml", **{"provider.inventory": str(tmp_path / "x.yml")})
    with pytest.raises(SpecDrift) as refused:
        cluster_drift.require_same(load_spec(fabric), state, "gpufleet configure")
    assert "gpufleet up --replace SPEC" in str(refused.value) and "provider.inventory" in str(refused.value)


def test_replace_takes_the_cluster_down_before_making_it_again(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet import pipeline
    from gpufleet.lifecycle import teardown

    # The site's machines do not exist: no utilization report to read over SSH (15 s of timeouts).
    monkeypatch.setattr(teardown, "save_before_teardown", lambda state, reporter: {"available": False})
    spec = write_spec(tmp_path / "lab.yaml")
    assert invoke("up", str(spec))[0] == 0
    downs: list[str] = []
    real_down = pipeline.down

    def down(old, reporter, durable=None):  # type: ignore[no-untyped-def]
        downs.append(old.provider.inventory)
        return real_down(old, reporter, durable)

    monkeypatch.setattr(pipeline, "down", down)
    other_inventory = tmp_path / "site.yml"
    other_inventory.write_text((ROOT / "inventories" / "examples" / "baremetal.yml").read_text())
    write_spec(spec, **{"provider.inventory": str(other_inventory)})
    pipeline.up(load_spec(spec), SilentReporter(), spec, replace=True)
    # The cluster made from the old inventory went down first, then the new one was recorded.
    assert downs == [str(ROOT / "inventories" / "examples" / "baremetal.yml")]
    record = json.loads((state_dir / "lab" / "state.json").read_text())
    assert record["spec"]["provider"]["inventory"] == str(other_inventory)
