"""``gpufleet check SPEC``: validate the spec and run the offline preflight checks."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from gpufleet.cli.common import JsonOpt, SpecArg, console, print_json
from gpufleet.errors import ExitCode
from gpufleet.preflight import errors, run_checks
from gpufleet.severity import FINDING_LEVELS, Severity
from gpufleet.spec import load_spec

# The choices of --level: the finding levels of Severity, as Typer lists an enum's values. Its members are
# computed, and mypy reads only a literal member list of the functional Enum API: hence its two ignores.
LevelChoice = StrEnum("LevelChoice", {level.name: level.value for level in FINDING_LEVELS})  # type: ignore[misc]


def check(
    spec_path: SpecArg,
    json_out: JsonOpt = False,
    level: Annotated[
        LevelChoice, typer.Option("--level", help="show findings at or above this level")
    ] = LevelChoice.INFO,  # type: ignore[attr-defined]
) -> None:
    """Validate SPEC and run the preflight checks. Exits 1 when any finding is an error."""
    spec = load_spec(spec_path)
    findings = run_checks(spec, min_level=Severity(level.value))
    failed = bool(errors(findings))
    if json_out:
        print_json({"spec": str(spec_path), "ok": not failed, "findings": [f.to_json() for f in findings]})
    else:
        if findings:
            table = Table(title=f"preflight: {spec.name} ({spec.provider.kind})", show_lines=False)
            table.add_column("level")
            table.add_column("check")
            table.add_column("where")
            table.add_column("what to change", overflow="fold")
            styles = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "dim"}
            for finding in findings:
                table.add_row(
                    f"[{styles[finding.level]}]{finding.level.value}[/]",
                    finding.check,
                    finding.path,
                    finding.message,
                )
            console.print(table)
        verdict = "[bold red]errors found[/]" if failed else "[green]ok[/]"
        console.print(f"{spec_path}: {verdict} ({len(findings)} finding(s))")
    if failed:
        raise typer.Exit(ExitCode.FAILED)
