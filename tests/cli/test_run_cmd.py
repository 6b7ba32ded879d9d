"""``gpufleet run`` is ``pipeline.run`` with a view that prints each step: one implementation of the job
(bake where the backend bakes in a run, check, up, configure, validate, down also after a failure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet import pipeline
from gpufleet.cli.app import app
from gpufleet.errors import ProvisionError
from gpufleet.lifecycle.teardown import Teardown
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_run_is_the_pipelines_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    def run(spec, out, reporter, **options):  # type: ignore[no-untyped-def]
        calls.append({"spec": spec.name, "out": out, **options})
        return pipeline.RunResult(passed=True, validation=None, teardown=None)

    monkeypatch.setattr(pipeline, "run", run)
    spec_path = ROOT / "examples" / "local.yaml"
    result = CliRunner().invoke(app, ["run", str(spec_path), "--keep", "--no-bake", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (call,) = calls
    assert call["out"] == tmp_path and call["keep"] is True and call["bake"] is False, call
    assert call["spec_path"] == spec_path and isinstance(call["view"], pipeline.RunView), call


class Recorder(pipeline.RunView):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def baked(self, baked: Any) -> None:
        self.seen.append(f"baked {baked}")

    def up(self, state: Any, inventory: Any) -> None:
        self.seen.append("up")

    def configured(self, result: Any) -> None:
        self.seen.append("configured")

    def before_validate(self) -> None:
        self.seen.append("before validate")

    def down(self, report: Teardown) -> None:
        self.seen.append("down")


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    done: list[str] = []
    monkeypatch.setattr("gpufleet.preflight.require_no_errors", lambda spec: done.append("check"))
    monkeypatch.setattr(
        pipeline, "up", lambda spec, reporter, path, replace=False: done.append("up") or (None, None)
    )
    monkeypatch.setattr(pipeline, "configure", lambda spec, reporter: done.append("configure"))

    def validate(spec, out, reporter, ledger=None):  # type: ignore[no-untyped-def]
        done.append("validate")
        raise ProvisionError("the login node went away")

    monkeypatch.setattr(pipeline, "validate", validate)
    monkeypatch.setattr(
        pipeline, "down", lambda spec, reporter: done.append("down") or Teardown(cluster=spec.name)
    )
    return done


@pytest.mark.parametrize(("example", "bakes"), [("local.yaml", True), ("aws-p5.yaml", False)])
def test_run_bakes_where_the_baker_bakes_in_a_run_and_tears_down_after_a_failure(
    steps: list[str], monkeypatch: pytest.MonkeyPatch, example: str, bakes: bool
) -> None:
    """Local bakes first (minutes of this machine); a cloud never starts a builder instance in a run."""
    from gpufleet.bake.cloud import CloudBaker
    from gpufleet.bake.local import LocalBaker

    for baker in (LocalBaker, CloudBaker):
        monkeypatch.setattr(
            baker, "build", lambda self, spec, reporter, rebuild=False: steps.append("bake") or "image"
        )
    view = Recorder()
    with pytest.raises(ProvisionError, match="login node"):
        pipeline.run(load_spec(ROOT / "examples" / example), Path("out"), None, bake=True, view=view)  # type: ignore[arg-type]
    assert steps == ["bake"] * bakes + ["check", "up", "configure", "validate", "down"], steps
    assert view.seen == ["baked image"] * bakes + ["up", "configured", "before validate", "down"], view.seen
