"""The ``gpufleet`` application: one command per verb, errors mapped to exit codes in one place.

Exit codes (README.md, "Using it"): 0 ok; 1 the verdict is negative (check found errors, the
validation gate failed); 2 bad command line; 3 spec invalid; 4 provisioning failed; 5 configuration
failed; 6 validation could not run; 7 no such cluster, or its state is inconsistent; 8 host prerequisite
missing; 9 leftovers after teardown; 10 the cluster is busy (another command holds its lock); 70 a bug in
gpufleet; 130 / 143 stopped by SIGINT / SIGTERM. Set GPUFLEET_DEBUG=1 for a traceback.

With ``--json`` every outcome, failures included, is one JSON document on stdout; a failure's is
``{"ok": false, "error": {"kind", "type", "message", "hint", "exit_code"}}``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeGuard

import typer
from rich.markup import escape
from typer.core import TyperGroup

from gpufleet.cli import adopt as adopt_cmd
from gpufleet.cli import baseline as baseline_cmd
from gpufleet.cli import check as check_cmd
from gpufleet.cli import cluster as cluster_cmd
from gpufleet.cli import image as image_cmd
from gpufleet.cli import leftovers as leftovers_cmd
from gpufleet.cli import plan as plan_cmd
from gpufleet.cli import reap as reap_cmd
from gpufleet.cli import report as report_cmd
from gpufleet.cli import util as util_cmd
from gpufleet.cli import validate as validate_cmd
from gpufleet.cli.common import err_console, print_json
from gpufleet.errors import ExitCode, GpufleetError, environment_problem
from gpufleet.lifecycle.lock import release_all
from gpufleet.lifecycle.signals import stop_on_signals

if TYPE_CHECKING:
    # The Context Click hands a group's invoke: the Click that Typer bundles (typer.Context, the public
    # name, is its subclass for command callbacks). Read by the type checker alone, never at run time.
    from typer._click import Context as ClickContext


def error_document(kind: str, error_type: str, message: str, hint: str | None, code: int) -> dict[str, Any]:
    return {
        "ok": False,
        "error": {"kind": kind, "type": error_type, "message": message, "hint": hint, "exit_code": code},
    }


class _UsageError(Protocol):
    """What gpufleet reads of Click's UsageError family."""

    exit_code: int

    def format_message(self) -> str: ...


def _is_usage_error(exc: BaseException) -> TypeGuard[_UsageError]:
    """A bad command line (Click's UsageError family, as Typer bundles it): it has its exit code (2) and
    a message of its own. Told apart by shape, so no private Click module is imported."""
    return isinstance(getattr(exc, "exit_code", None), int) and callable(getattr(exc, "format_message", None))


class GpufleetGroup(TyperGroup):
    """Maps gpufleet's errors, usage errors, signals and bugs to a message (or a JSON document with
    ``--json``) and the documented exit code, for every command alike."""

    json_wanted = False

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        raw = list(sys.argv[1:] if args is None else args)
        options = raw[: raw.index("--")] if "--" in raw else raw
        self.json_wanted = "--json" in options
        if not self.json_wanted:
            return super().main(raw, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            code = super().main(raw, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            code = int(ExitCode.SIGINT)
        except Exception as exc:
            if not _is_usage_error(exc):
                raise
            message = exc.format_message()
            err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
            print_json(error_document("usage", type(exc).__name__, message, None, exc.exit_code))
            code = exc.exit_code
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            with stop_on_signals():
                return super().invoke(ctx)
        except GpufleetError as exc:
            if os.environ.get("GPUFLEET_DEBUG"):
                raise
            code = int(exc.exit_code)
            self._report(ExitCode(code).name.lower(), type(exc).__name__, exc.message, exc.hint, code)
            raise typer.Exit(code) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            if os.environ.get("GPUFLEET_DEBUG") or _is_usage_error(exc):
                raise
            # A full disk, a read-only filesystem, no permission, too many open files wherever they were
            # not named closer to the write: the environment's state, with the path; not a bug.
            problem = environment_problem(exc) if isinstance(exc, OSError) else None
            if problem is not None:
                code = int(problem.exit_code)
                self._report("environment", type(problem).__name__, problem.message, problem.hint, code)
                raise typer.Exit(code) from None
            code = int(ExitCode.INTERNAL)
            self._report(
                "internal",
                type(exc).__name__,
                f"gpufleet failed unexpectedly: {type(exc).__name__}: {exc}",
                "this is a bug in gpufleet; run again with GPUFLEET_DEBUG=1 for the traceback and report it",
                code,
            )
            raise typer.Exit(code) from None
        finally:
            release_all()

    def _report(self, kind: str, error_type: str, message: str, hint: str | None, code: int) -> None:
        err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
        if hint:
            err_console.print(f"[bold]To fix:[/] {escape(hint)}", soft_wrap=True)
        if self.json_wanted:
            print_json(error_document(kind, error_type, message, hint, code))


app = typer.Typer(
    name="gpufleet",
    cls=GpufleetGroup,
    help="From a cluster spec to a validated multi-node GPU Slurm cluster, and back to nothing.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

app.command("check")(check_cmd.check)
app.command("report")(report_cmd.report)
app.command("plan")(plan_cmd.plan)
app.command("up")(cluster_cmd.up)
app.command("adopt")(adopt_cmd.adopt)
app.command("stack-pin")(adopt_cmd.stack_pin)
app.command("configure")(cluster_cmd.configure)
app.command("validate")(validate_cmd.validate)
app.command("run")(validate_cmd.run)
app.command("status")(cluster_cmd.status)
app.command("down")(cluster_cmd.down)
app.command("reap")(reap_cmd.reap)
app.command("leftovers")(leftovers_cmd.leftovers)
app.command("util")(util_cmd.util)
app.command("baseline")(baseline_cmd.baseline)
app.add_typer(image_cmd.app, name="image")


def gpufleet_version() -> str:
    try:
        return package_version("gpufleet")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufleet {gpufleet_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="print the version and exit"),
    ] = False,
) -> None:
    """From a cluster spec to a validated multi-node GPU Slurm cluster, and back to nothing."""


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
