"""The ``gpufleet`` application: one command per verb, errors mapped to exit codes in one place.

Exit codes (README.md, "Using it"): 0 ok; 1 the verdict is negative (check found errors, the
validation gate failed);
2 bad command line; 3 spec invalid; 4 provisioning failed; 5 configuration failed; 6 validation could
not run; 7 cluster state missing or inconsistent; 8 host prerequisite missing; 9 leftovers after
teardown. Set GPUFLEET_DEBUG=1 for a traceback.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from gpufleet.cli import check as check_cmd
from gpufleet.cli import cluster as cluster_cmd
from gpufleet.cli import image as image_cmd
from gpufleet.cli import plan as plan_cmd
from gpufleet.cli import reap as reap_cmd
from gpufleet.cli import report as report_cmd
from gpufleet.cli import validate as validate_cmd
from gpufleet.cli.common import err_console
from gpufleet.errors import GpufleetError

app = typer.Typer(
    name="gpufleet",
    help="From a cluster spec to a validated multi-node GPU Slurm cluster, and back to nothing.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.command("check")(check_cmd.check)
app.command("report")(report_cmd.report)
app.command("plan")(plan_cmd.plan)
app.command("up")(cluster_cmd.up)
app.command("configure")(cluster_cmd.configure)
app.command("validate")(validate_cmd.validate)
app.command("run")(validate_cmd.run)
app.command("status")(cluster_cmd.status)
app.command("down")(cluster_cmd.down)
app.command("reap")(reap_cmd.reap)
app.add_typer(image_cmd.app, name="image")


@app.callback()
def _root() -> None:
    """From a cluster spec to a validated multi-node GPU Slurm cluster, and back to nothing."""


def main() -> None:
    """Console-script entry point: run the app and map gpufleet's errors to exit codes."""
    try:
        app()
    except GpufleetError as exc:
        if os.environ.get("GPUFLEET_DEBUG"):
            raise
        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            err_console.print(f"[bold]To fix:[/] {escape(exc.hint)}", soft_wrap=True)
        sys.exit(int(exc.exit_code))


if __name__ == "__main__":
    main()
