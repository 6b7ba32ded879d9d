"""``gpufleet leftovers SPEC``: what the cloud still holds for a cluster, from its spec alone.

The check ``gpufleet down`` runs after its destroy, for a destroy made elsewhere (``pulumi destroy`` in
``stacks/`` from CI): no state folder is needed. It waits out the listing APIs' lag
(``gpufleet.infra.leftovers.settle``) and exits 9 when something is still there.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gpufleet.cli.common import JsonOpt, SpecArg, console, err_console, print_json
from gpufleet.cli.progress import RichReporter
from gpufleet.errors import ExitCode
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.leftovers import LEFTOVER_BOUND_S, LEFTOVER_INTERVAL_S, settle
from gpufleet.providers import PULUMI_KINDS
from gpufleet.spec import load_spec


def leftovers(
    spec_path: SpecArg,
    json_out: JsonOpt = False,
    bound: Annotated[
        float, typer.Option("--bound", help="seconds to wait at most for two reads in a row to agree")
    ] = LEFTOVER_BOUND_S,
    interval: Annotated[
        float, typer.Option("--interval", help="seconds between two reads")
    ] = LEFTOVER_INTERVAL_S,
) -> None:
    """List what the cloud still holds tagged (labelled) for the spec's cluster; exit 9 when anything is."""
    spec = load_spec(spec_path)
    if spec.provider.kind not in PULUMI_KINDS:
        raise typer.BadParameter(
            f"cluster '{spec.name}' is on provider '{spec.provider.kind}': only the clouds "
            f"({', '.join(PULUMI_KINDS)}) have a leftover check",
            param_hint="SPEC",
        )
    cloud = pulumi_backend_of(spec.provider.kind)
    reporter = RichReporter(err_console if json_out else console)
    cloud.check_credentials(spec)
    with reporter.step(f"looking for what is left of cluster {spec.name}"):
        settled = settle(
            lambda: cloud.find_leftovers(spec), bound_s=bound, interval_s=interval, note=reporter.info
        )
    if json_out:
        print_json(
            {
                "cluster": spec.name,
                "provider": spec.provider.kind,
                "reads": settled.reads,
                "seconds": round(settled.seconds, 1),
                "agreed": settled.agreed,
                "leftovers": [
                    {
                        "kind": item.leftover.kind,
                        "id": item.leftover.id,
                        "detail": item.leftover.detail,
                        "listed_for_s": round(item.seconds, 1),
                        "reads": item.reads,
                    }
                    for item in settled.leftovers
                ],
            }
        )
    else:
        console.print(f"cluster {escape(spec.name)}: {escape(settled.summary())}")
        for item in settled.leftovers:
            console.print(f"  {escape(str(item))}")
    if settled.leftovers:
        raise typer.Exit(ExitCode.LEFTOVERS)
