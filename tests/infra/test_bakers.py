"""One baker per backend (``Backend.baker``): local bakes podman images in a run, a cloud bakes through its
own driver only when asked, bare metal bakes nothing; the current hash of a spec is its baker's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufleet.bake.baker import baker_for, spec_hash
from gpufleet.bake.cloud import CloudBaker
from gpufleet.bake.key import bake_pins
from gpufleet.bake.local import LocalBaker
from gpufleet.configure.runner import project_root
from gpufleet.infra.backend import backend_for
from gpufleet.infra.images import content_hash
from gpufleet.infra.local import bake as local_bake
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
    assert spec_hash(aws) == content_hash(project_root(), bake_pins(backend_for(aws), aws))  # type: ignore[arg-type]
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
