"""Which stacks of stacks/ a change touches (the CI workflows plan only those), and the spec of a stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.errors import SpecError
from gpufleet.infra.stack_configs import changed_stacks, main, read_stack

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "stacks"


@pytest.mark.parametrize(
    ("changed", "kind", "expected"),
    [
        (["stacks/Pulumi.p5-fsx.yaml"], "aws", ["p5-fsx"]),
        (["stacks/Pulumi.p5-fsx.yaml"], "gcp", []),
        (["examples/aws-p4d-spot.yaml"], "aws", ["p4d-spot"]),
        (["examples/gcp-a3-mega.yaml", "docs/ci.md"], "gcp", ["a3-mega-lustre"]),
        (["examples/local.yaml", "README.md"], "aws", []),
        (["src/gpufleet/infra/aws/fleet.py"], "aws", ["p4d-spot", "p5-capacity-block", "p5-fsx"]),
        (["roles/nccl/defaults/main.yml"], "gcp", ["a3-mega-lustre", "a3-ultra-reservation"]),
        (["stacks/__main__.py"], "gcp", ["a3-mega-lustre", "a3-ultra-reservation"]),
        ([], "aws", []),
    ],
)
def test_only_the_stacks_a_change_touches(changed, kind, expected):
    assert changed_stacks(STACKS, ROOT, changed, kind) == expected


def test_the_spec_of_a_stack():
    stack = read_stack(STACKS, "p5-fsx")
    assert stack is not None and stack.spec.name == "llm-p5"
    assert stack.spec_path.resolve() == ROOT / "examples" / "aws-p5.yaml"


@pytest.mark.parametrize("name", ["../etc/passwd", "p5 fsx", "$(id)", ""])
def test_a_stack_name_that_is_no_stack_name_is_refused(name):
    with pytest.raises(SpecError, match="is not a Pulumi stack name"):
        read_stack(STACKS, name)


def test_the_module_entry_point_the_workflows_run(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["spec", "stacks", "a3-mega-lustre"]) == 0
    assert capsys.readouterr().out.strip() == "examples/gcp-a3-mega.yaml"
    assert main(["spec", "stacks", "no-such-stack"]) == 3
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.infra.stack_configs", "changed", "stacks", "aws"],
        input="stacks/Pulumi.p5-fsx.yaml\nexamples/gcp-a3-ultra.yaml\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, '["p5-fsx"]'), done.stderr
