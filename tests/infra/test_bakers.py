"""One baker per backend, built from the backend table (``gpufleet.bake.baker``): local bakes podman images
in a run, a cloud bakes through its own driver only when asked, bare metal bakes nothing; the current hash
of a spec is its baker's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufleet.bake.baker import baker_for, spec_hash
from gpufleet.bake.cloud import CloudBaker
from gpufleet.bake.local import LocalBaker
from gpufleet.infra.backend import backend_for, pulumi_backend_of
from gpufleet.infra.images import bake_pins, content_hash
from gpufleet.infra.local import bake as local_bake
from gpufleet.paths import project_root
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


def spec_of(example: str):  # type: ignore[no-untyped-def]
    return load_spec(ROOT / "examples" / example)


@pytest.mark.parametrize(
    ("example", "kind", "in_run"),
    [
        ("local.yaml", LocalBaker, True),
        ("aws-p5.yaml", CloudBaker, False),
        ("gcp-a3-mega.yaml", CloudBaker, False),
    ],
)
def test_each_backend_has_its_baker(example: str, kind: type, in_run: bool) -> None:
    spec = spec_of(example)
    baker = baker_for(spec)
    assert isinstance(baker, kind) and baker.in_run is in_run
    if isinstance(baker, CloudBaker):
        assert baker.cloud is backend_for(spec), "the cloud's baker drives that cloud's own backend"


def test_bare_metal_bakes_nothing_and_has_no_hash() -> None:
    spec = spec_of("baremetal.yaml")
    assert baker_for(spec) is None and spec_hash(spec) is None


def test_the_hash_of_a_spec_is_its_bakers_one_content_hash() -> None:
    aws = spec_of("aws-p5.yaml")
    assert spec_hash(aws) == content_hash(project_root(), bake_pins(pulumi_backend_of("aws").images, aws))
    local = spec_of("local.yaml")
    assert spec_hash(local) == content_hash(project_root(), local_bake.bake_pins(local))


def test_image_build_of_a_bare_metal_spec_says_nothing_is_baked(monkeypatch, capsys) -> None:
    from gpufleet.cli.app import main

    monkeypatch.setattr(
        sys, "argv", ["gpufleet", "image", "build", str(ROOT / "examples" / "baremetal.yaml")]
    )
    with pytest.raises(SystemExit) as exited:
        main()
    err = " ".join(capsys.readouterr().err.split())
    assert exited.value.code == 3, err
    assert "'baremetal' bakes no node image" in err and "configure installs everything" in err, err


class _Chosen(Exception):
    """Raised by the fake backend's ``up`` with what it was handed (the test needs nothing after it)."""


def test_up_asks_the_baker_for_the_image_and_hands_it_to_the_backend(tmp_path, monkeypatch) -> None:
    """The pipeline chooses the image (issue 25, review 2.4 step 3): ``Baker.newest`` answers, and the
    backend's ``up`` gets the answer as data instead of looking bake policy up itself."""
    from gpufleet import pipeline
    from gpufleet.progress import SilentReporter

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = spec_of("local.yaml")
    chosen = object()
    asked: list[str] = []

    class Baker:
        def newest(self, spec_, reporter):  # type: ignore[no-untyped-def]
            asked.append(spec_.name)
            return chosen

    class Backend:
        def up(self, spec_, state, reporter, spec_path, baked=None):  # type: ignore[no-untyped-def]
            raise _Chosen(baked)

    monkeypatch.setattr(pipeline, "baker_for", lambda spec_: Baker())
    monkeypatch.setattr(pipeline, "backend_for", lambda spec_: Backend())
    with pytest.raises(_Chosen) as handed:
        pipeline.up(spec, SilentReporter())
    assert asked == [spec.name] and handed.value.args == (chosen,)


def test_a_cloud_deploy_boots_the_image_it_is_handed_and_looks_none_up(monkeypatch) -> None:
    """The stack driver keeps only stack work: it selects the stack with the image it was given and never
    lists images itself (before, ``deploy`` asked ``find_baked``, which listed the cloud's images)."""
    from types import SimpleNamespace

    from gpufleet.infra import pulumi_stack
    from gpufleet.infra.images import CloudImage
    from gpufleet.progress import SilentReporter
    from gpufleet.state import ClusterState

    spec = spec_of("aws-p5.yaml")
    cloud = backend_for(spec)
    chosen = CloudImage("ami-0baked", "gpufleet-abc", "abc123", "ami-0base", "2026-11-24T00:00:00Z")
    selected: list[object] = []
    stack = SimpleNamespace(
        export_stack=lambda: SimpleNamespace(deployment={}),
        up=lambda **_: SimpleNamespace(outputs={}),
    )

    def no_listing(self, scope):  # type: ignore[no-untyped-def]
        raise AssertionError("the driver looked baked images up itself")

    def select_stack(self, spec_, state, program=None, baked=None):  # type: ignore[no-untyped-def]
        selected.append(baked)
        return stack

    monkeypatch.setattr(pulumi_stack, "pulumi_cli", lambda: Path("/usr/bin/true"))
    monkeypatch.setattr(type(cloud), "check_credentials", lambda self, spec_: None)
    monkeypatch.setattr(type(cloud), "check_tools", lambda self, spec_: None)
    monkeypatch.setattr(type(cloud.images), "list_images", no_listing)  # type: ignore[attr-defined]
    monkeypatch.setattr(type(cloud), "select_stack", select_stack)
    state = ClusterState.for_name(spec.name)
    assert cloud.deploy(spec, state, SilentReporter(), baked=chosen) == {}  # type: ignore[attr-defined]
    assert cloud.deploy(spec, state, SilentReporter()) == {}  # type: ignore[attr-defined]
    assert selected == [chosen, None]
