"""The reviewed plan snapshots of the example specs, and the one command that rewrites them.

A test run only compares: ``render(snapshot)`` against the file a person reviewed. When a change to a plan is
intended, rewrite the files with ``.venv/bin/python -m tests.infra.plan_snapshots`` (from the repository
root) and review ``git diff tests/infra/*/snapshots`` before committing: the diff is the change to what
``gpufleet plan`` shows for that example.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpufleet.infra.program import hourly_cost, plan_spec
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Snapshot:
    """One example spec, the file its reviewed plan lives in, and the creation time the plan is pinned to."""

    example: Path
    path: Path
    created_at: datetime
    with_cost: bool

    def render(self) -> str:
        """The offline plan of the example as the snapshot file holds it (sorted, stable JSON)."""
        spec = load_spec(self.example)
        plan = plan_spec(spec, self.created_at)
        data: dict[str, object] = {
            "resources": [r.to_json() for r in sorted(plan.resources, key=lambda r: (r.type, r.name))],
            "outputs": plan.outputs,
        }
        if self.with_cost:
            data["cost_per_hour_usd"] = hourly_cost(spec)[0]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def reviewed(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def mismatch(self) -> str:
        """The failure message of a test that found the plan changed."""
        return (
            f"the plan of examples/{self.example.name} differs from {self.path.relative_to(ROOT)}; if the "
            "change is intended, rewrite it with `.venv/bin/python -m tests.infra.plan_snapshots` and review "
            "the git diff"
        )


# The creation times match each cloud's test library (aws_specs, gcp_testlib, azure_testlib).
AWS_P5 = Snapshot(
    ROOT / "examples" / "aws-p5.yaml",
    HERE / "aws" / "snapshots" / "aws-p5.plan.json",
    datetime(2026, 11, 22, 9, 0, tzinfo=UTC),
    with_cost=True,
)
GCP_A3_MEGA = Snapshot(
    ROOT / "examples" / "gcp-a3-mega.yaml",
    HERE / "gcp" / "snapshots" / "gcp-a3-mega.plan.json",
    datetime(2026, 11, 22, 9, 30, tzinfo=UTC),
    with_cost=False,
)
AZURE_ND_H100 = Snapshot(
    ROOT / "examples" / "azure-nd-h100.yaml",
    HERE / "azure" / "snapshots" / "azure-nd-h100.plan.json",
    datetime(2026, 11, 27, 9, 30, tzinfo=UTC),
    with_cost=False,
)
ALL = (AWS_P5, GCP_A3_MEGA, AZURE_ND_H100)


def main() -> int:
    """Rewrite every snapshot; print which changed (review them with git diff)."""
    for snapshot in ALL:
        rendered = snapshot.render()
        changed = not snapshot.path.exists() or snapshot.reviewed() != rendered
        snapshot.path.write_text(rendered, encoding="utf-8")
        print(f"{'changed' if changed else 'same   '} {snapshot.path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
