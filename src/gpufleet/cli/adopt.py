"""``gpufleet adopt SPEC --stack NAME`` and ``gpufleet stack-pin --stack NAME``: CI's path from ``pulumi up``.

``stack-pin`` runs before a project's ``pulumi up`` (it keeps the time of the stack's first up in
``gpufleet:createdAt``); ``adopt`` runs after it and writes what ``gpufleet up`` would have written, so
``configure``, ``validate``, ``status`` and ``down`` work on the cluster (``gpufleet.adopt``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpufleet import adopt as adoption
from gpufleet.cli.cluster import VerboseOpt, render_up, reporter_for
from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json
from gpufleet.infra.adopted import pin_created_at
from gpufleet.spec import load_spec

StackOpt = Annotated[
    str,
    typer.Option("--stack", help="the Pulumi stack that made the cluster (e.g. p5-fsx)", show_default=False),
]
ProjectOpt = Annotated[
    Path,
    typer.Option(
        "--project-dir",
        help="the Pulumi project folder that holds the stack (its Pulumi.yaml): any project using the "
        "component",
    ),
]
OutputsOpt = Annotated[
    Path | None,
    typer.Option(
        "--outputs",
        help="read the stack's outputs from this file (pulumi stack output --json --show-secrets) instead "
        "of selecting the stack",
        show_default=False,
    ),
]


def adopt(
    spec_path: SpecArg,
    stack: StackOpt,
    project_dir: ProjectOpt = Path("stacks"),
    outputs: OutputsOpt = None,
    json_out: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Take over a cluster that 'pulumi up' made: write its state and inventory (nothing is created)."""
    spec = load_spec(spec_path)
    state, inventory = adoption.adopt(
        spec,
        reporter_for(json_out, verbose),
        stack=stack,
        project_dir=project_dir,
        outputs_file=outputs,
        spec_path=spec_path,
    )
    render_up(spec, state, inventory, json_out)


def stack_pin(stack: StackOpt, project_dir: ProjectOpt = Path("stacks"), json_out: JsonOpt = False) -> None:
    """Before 'pulumi up': keep the time of the stack's first up in its config (gpufleet:createdAt)."""
    value, source = pin_created_at(stack, project_dir.resolve(), datetime.now(UTC))
    if json_out:
        print_json({"stack": stack, "created_at": value, "from": source})
        return
    console.print(f"stack {escape(stack)}: gpufleet:createdAt = {value} (from {source})")
