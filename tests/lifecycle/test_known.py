"""Is a cluster known here? A local one is also known by its podman objects, as the backend lists them."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from gpufleet.errors import EnvironmentProblem, StateError
from gpufleet.lifecycle import known
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]


class _Labelled:
    """Stands in for LocalCluster: what its ``leftovers`` finds labelled for the cluster, or no podman."""

    found: ClassVar[list[str] | Exception] = []

    def __init__(self, spec: ClusterSpec, state: ClusterState, reporter: object) -> None:
        self.spec = spec

    def leftovers(self) -> list[str]:
        if isinstance(self.found, Exception):
            raise self.found
        return [f"{item}-{self.spec.name}" for item in self.found]


@pytest.fixture
def local_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClusterSpec:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    # the module (the package's ``backend`` attribute is the backend object of the same name)
    monkeypatch.setattr(importlib.import_module("gpufleet.infra.local.backend"), "LocalCluster", _Labelled)
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["name"] = "knowme"
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


def test_a_local_cluster_without_state_is_known_by_the_backends_leftovers(
    local_spec: ClusterSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Labelled, "found", ["container gpufleet", "network gpufleet"])
    state = ClusterState.for_name(local_spec.name)
    assert not state.root.exists()
    assert known.local_objects(local_spec) == ["container gpufleet-knowme", "network gpufleet-knowme"]
    assert known.exists(local_spec, state)
    known.require_exists(local_spec, state)  # no StateError


@pytest.mark.parametrize("found", [[], EnvironmentProblem("podman is not installed")])
def test_nothing_labelled_or_no_podman_is_a_cluster_never_made(
    local_spec: ClusterSpec, monkeypatch: pytest.MonkeyPatch, found: list[str] | Exception
) -> None:
    monkeypatch.setattr(_Labelled, "found", found)
    state = ClusterState.for_name(local_spec.name)
    assert known.local_objects(local_spec) == []
    with pytest.raises(StateError, match="no podman container, network or volume labelled"):
        known.require_exists(local_spec, state)
