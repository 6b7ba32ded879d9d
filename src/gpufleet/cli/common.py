"""Options and output helpers shared by every command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)

SpecArg = Annotated[
    Path,
    typer.Argument(help="the cluster spec (YAML), e.g. examples/local.yaml", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document for machines")]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()
