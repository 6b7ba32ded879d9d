"""The cluster's life as library calls: up -> configure -> validate -> down, with the state kept on the way.

The CLI renders what these return and nothing more; ``run`` is the whole job (``gpufleet run`` calls it,
with a ``RunView`` that prints each step as it ends). Each step records its phase in the cluster's state
folder (``gpufleet.state``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.bake.baker import baker_for
from gpufleet.errors import StateError, writing
from gpufleet.infra.adopted import AdoptedStack, adopted_of
from gpufleet.infra.backend import backend_for
from gpufleet.infra.software import with_software
from gpufleet.inventory.model import Inventory
from gpufleet.lifecycle import drift, known, teardown
from gpufleet.lifecycle.lock import hold_cluster_lock
from gpufleet.lifecycle.phases import tracked
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, SchedulerKind
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.bake.result import BakeResult
    from gpufleet.configure.runner import PlayResult
    from gpufleet.errors import GpufleetError
    from gpufleet.lifecycle.durable_copy import DurableCopyOptions
    from gpufleet.validate.suite import SuiteResult


def up(
    spec: ClusterSpec, reporter: Reporter, spec_path: Path | None = None, *, replace: bool = False
) -> tuple[ClusterState, Inventory]:
    """Bring the cluster up (re-runnable: what exists is kept) and write its inventory. A spec that differs
    from the one the cluster was made from is shown and applied where the backend changes it in place, and
    refused elsewhere, or from another file, unless ``replace`` (``lifecycle.drift``): then a cluster whose
    machines must change is taken down first and made again."""
    hold_cluster_lock(spec.name, "up")
    state = ClusterState.for_name(spec.name)
    changed = drift.check_up(spec, state, spec_path, replace=replace)
    if changed is not None and changed.remade:
        reporter.info(
            f"--replace: cluster {spec.name} is taken down and made again for:\n"
            + "\n".join(f"  {c}" for c in changed.remade)
        )
        down(changed.recorded_spec(), reporter).raise_for_leftovers()
        state = ClusterState.for_name(spec.name)
    elif changed is not None and changed.in_place:
        reporter.info("changes applied in place:\n" + "\n".join(f"  {c}" for c in changed.in_place))
    state.begin(spec, spec_path)
    state.ensure_munge_key()
    with tracked(state, "up"):
        # The pipeline chooses the image the nodes boot (the newest baked from the roles and pins now) and
        # hands it to the backend as data; a backend without a baker (bare metal) boots nothing.
        baker = baker_for(spec)
        baked = baker.newest(spec, reporter) if baker is not None else None
        inventory = with_software(backend_for(spec).up(spec, state, reporter, spec_path, baked=baked), spec)
        with writing("the cluster's inventory", state.inventory_file):
            inventory.write(state.inventory_file)
    applied = [str(c) for c in changed.in_place] if changed is not None and not changed.remade else []
    state.mark("up", "done", hosts=len(inventory.hosts), **({"applied": applied} if applied else {}))
    return state, inventory


def load_inventory(spec: ClusterSpec, command: str | None = None) -> tuple[ClusterState, Inventory]:
    """The state and inventory of a cluster that is up, or ``StateError``. ``command`` (configure,
    validate: what acts on the cluster as ``up`` made it): also ``SpecDrift`` when ``spec`` differs from the
    cluster's but for the run's own settings, naming what differs and the command that applies it."""
    state = ClusterState.for_name(spec.name)
    state.load()
    if command is not None:
        drift.require_same(spec, state, command)
    if not state.inventory_file.exists():
        raise StateError(
            f"cluster '{spec.name}' has no inventory yet (its 'up' did not finish)",
            hint="run 'gpufleet up SPEC' (it is safe to re-run)",
        )
    return state, Inventory.read(state.inventory_file)


def configure(spec: ClusterSpec, reporter: Reporter) -> PlayResult:
    """Run playbooks/site.yml on the cluster (safe to re-run). A Kubernetes cluster is configured by its
    own operators (GPU Operator, device plugins): nothing runs, and the result says so."""
    from gpufleet.bake.baker import baked_and_current
    from gpufleet.configure import relay
    from gpufleet.configure.runner import PlayResult, run_playbook

    if spec.scheduler.kind is SchedulerKind.KUBERNETES:
        load_inventory(spec)  # the cluster must be up (surveyed)
        reporter.info(
            "configure: nothing to do on Kubernetes (its GPU Operator and device plugins configure the nodes)"
        )
        return PlayResult(ok=True, changed=0, install_phase="skipped: Kubernetes nodes are the cluster's own")

    choice = relay.chosen()  # GPUFLEET_CONFIGURE_FROM: auto, here or head (docs/architecture.md)
    hold_cluster_lock(spec.name, "configure")
    state, inventory = load_inventory(spec, "gpufleet configure")
    baked = baked_and_current(spec, inventory.baked_image_hash)
    if baked and inventory.boot_configure and choice == "auto":
        if not str(spec.software.container_image or "").startswith("/"):
            # The nodes configured themselves at boot (docs/boot-configure.md): wait for them, push nothing.
            return _configure_at_boot(state, inventory, reporter)
        # A squashfs file on this machine: the controller's own play cannot copy it from here, a push can.
        reporter.info(
            f"configure: pushed, not waited for: software.container_image {spec.software.container_image} "
            "is a file on this machine, which only a push copies to the cluster (docs/boot-configure.md)"
        )
    on_head = relay.runs_on_head(choice, inventory, baked)
    if baked:
        reporter.info(f"nodes run the baked image {baked[:12]} of the current roles: install phase skipped")
    step = "configure: playbooks/site.yml" + (" (configure phase)" if baked else "")
    step += f" from {inventory.controller.name}" if on_head else ""
    with tracked(state, "configure"), reporter.step(step):
        result = (
            relay.configure_on_head(
                inventory,
                state.ensure_munge_key(),
                state.logs_dir / "ansible-head",
                reporter,
                baked=baked,
                required=choice == "head",
            )
            if on_head
            else None
        )
        if result is None:
            result = run_playbook(
                "site.yml",
                state.inventory_file,
                state.logs_dir / "ansible",
                reporter,
                extravars={"munge_key_file": str(state.ensure_munge_key())},
                skip_tags="install" if baked else None,
            )
    if baked:
        result.install_phase = f"skipped: baked image {baked}"
    state.mark("configure", "done", changed=result.changed)
    return result


def _configure_at_boot(state: ClusterState, inventory: Inventory, reporter: Reporter) -> PlayResult:
    """Wait for the nodes' own configure: the boot's, right after ``up``; on a running cluster (a configure
    ran since the last ``up``) every node's unit is started again first."""
    from gpufleet.configure.boot_wait import configure_at_boot

    phases = state.load().get("phases", {})
    up_at, configured_at = phases.get("up", {}).get("at", ""), phases.get("configure", {}).get("at", "")
    rerun = bool(configured_at) and configured_at >= up_at
    with tracked(state, "configure"), reporter.step("configure: the nodes' own (configured at boot)"):
        result = configure_at_boot(inventory, reporter, rerun=rerun)
    result.install_phase = f"skipped: baked image {inventory.baked_image_hash}"
    state.mark("configure", "done", changed=result.changed, at_boot=True)
    return result


def validate(spec: ClusterSpec, out: Path, reporter: Reporter, ledger: Path | None = None) -> SuiteResult:
    """Run the validation suite through the spec's scheduler (Slurm on the login node, or pods and MPIJobs on
    Kubernetes); the report goes to ``out``, the figures to the ledger (``validate.ledger``: ``ledger``, else
    the state folder's). On Kubernetes, whatever the run made is deleted afterwards and
    listed again: anything left is ``LeftoversError`` (exit 9), after the report is written."""
    from gpufleet.errors import LeftoversError
    from gpufleet.monitoring import utilization
    from gpufleet.validate.ledger import ledger_path
    from gpufleet.validate.report import append_section, require_room
    from gpufleet.validate.suite import run_suite, scheduler_for

    kubernetes = spec.scheduler.kind is SchedulerKind.KUBERNETES
    if kubernetes and not ClusterState.for_name(spec.name).inventory_file.exists():
        up(spec, reporter)  # a cluster handed over: up only surveys it and records its nodes
    hold_cluster_lock(spec.name, "validate")
    state, inventory = load_inventory(spec, "gpufleet validate")
    require_room(out)
    collectives = ", ".join(c.value for c in spec.validation.collectives)
    started = time.time()
    how = "as MPIJobs on Kubernetes" if kubernetes else "through Slurm"
    with (
        tracked(state, "validate"),
        reporter.step(f"validate: {collectives} {how}"),
        writing("the validation report", out),
    ):
        scheduler = scheduler_for(spec, inventory)
        try:
            result = run_suite(spec, inventory, scheduler, out, ledger=ledger_path(ledger))
        finally:
            left = scheduler.cleanup()
        append_section(result.report, "utilization", utilization.during(inventory, started, time.time()))
    state.mark("validate", "passed" if result.passed else "failed", report=str(out.resolve()))
    if left:
        raise LeftoversError(
            f"validation of {spec.name} left {len(left)} object(s) on the cluster: {', '.join(left[:20])}",
            hint="they carry the label gpufleet.io/cluster="
            + spec.name
            + "; gpufleet down SPEC deletes them",
        )
    return result


def status(spec: ClusterSpec) -> dict[str, Any]:
    """The state record and what the backend knows about the cluster."""
    state = ClusterState.for_name(spec.name)
    known.require_exists(spec, state)
    record = state.load() if state.exists() else None
    adopted = adopted_of(state)  # the project's stack name, which CI and `pulumi` commands know it by
    result: dict[str, Any] = {
        "cluster": spec.name,
        "stack": adopted.stack if adopted else None,
        "provider": spec.provider.kind,
        "state": record,
    }
    result.update(backend_for(spec).status(spec, state))
    return result


def down(
    spec: ClusterSpec,
    reporter: Reporter,
    durable: DurableCopyOptions | None = None,
    project: AdoptedStack | None = None,
) -> teardown.Teardown:
    """Destroy everything the cluster made, then check that nothing is left (see ``lifecycle.teardown``).
    ``durable``: how long to wait for the filesystem's export to its durable copy, or to skip it.

    A cluster this machine already removed is no error (nothing to do); one it never made is
    (``StateError``, exit 7). ``project``: the cluster is a project's stack (``gpufleet down --stack``,
    the CI workflows' destroy), destroyed through it whether or not this machine adopted it (a ``pulumi
    up`` that failed half-way made resources but no outputs to adopt)."""
    hold_cluster_lock(spec.name, "down")
    state = ClusterState.for_name(spec.name)
    if project is not None:
        return _down_project_stack(spec, state, reporter, durable, project)
    gone = known.removed_at(spec.name)
    if gone and not known.exists(spec, state):
        reporter.info(f"cluster {spec.name} was already removed at {gone}")
        return teardown.Teardown(cluster=spec.name)
    known.require_exists(spec, state)
    report = teardown.down(spec, state, reporter, durable)
    if not report.leftovers:
        known.record_removed(spec.name)
    return report


def _down_project_stack(
    spec: ClusterSpec,
    state: ClusterState,
    reporter: Reporter,
    durable: DurableCopyOptions | None,
    project: AdoptedStack,
) -> teardown.Teardown:
    from gpufleet.infra.adopted import stack_record

    if state.exists():
        adopted = adopted_of(state)
        if adopted is None or adopted.stack != project.stack:
            made = f"adopted from stack '{adopted.stack}'" if adopted else "made here by 'gpufleet up'"
            raise StateError(
                f"cluster '{spec.name}' on this machine was {made}, not stack '{project.stack}'",
                hint="run 'gpufleet down SPEC' without --stack to destroy the cluster this machine records",
            )
        report = teardown.down(spec, state, reporter, durable)
    else:
        held = stack_record(project)
        if held is not None and held.cluster != spec.name:
            raise StateError(
                f"stack '{project.stack}' holds cluster '{held.cluster}', but the spec names '{spec.name}'",
                hint="pass the spec the stack's config names (gpufleet:spec)",
            )
        report = teardown.down_project_stack(
            spec, project, reporter, durable, held.cluster_id if held is not None else None
        )
    if not report.leftovers:
        known.record_removed(spec.name)
    return report


@dataclass
class RunResult:
    passed: bool
    validation: SuiteResult | None
    teardown: teardown.Teardown | None


class RunView:
    """What ``run`` shows as each step ends (nothing here; the CLI prints each)."""

    def baked(self, baked: BakeResult) -> None: ...

    def up(self, state: ClusterState, inventory: Inventory) -> None: ...

    def configured(self, result: PlayResult) -> None: ...

    def before_validate(self) -> None: ...

    def validated(self, result: SuiteResult) -> None: ...

    def down(self, report: teardown.Teardown) -> None: ...

    def teardown_failed(self, error: GpufleetError) -> None: ...

    def kept(self) -> None: ...


def run(
    spec: ClusterSpec,
    out: Path,
    reporter: Reporter,
    *,
    spec_path: Path | None = None,
    keep: bool = False,
    bake: bool = False,
    replace: bool = False,
    view: RunView | None = None,
    ledger: Path | None = None,
) -> RunResult:
    """The whole job: (bake,) check, up, configure, validate, then down (also when a step fails, unless
    ``keep``). ``bake``: first bake the roles' install phase into a node image where the backend's baker
    does so in a run (local), if none matches. ``replace``: as ``up``'s."""
    from gpufleet.errors import GpufleetError
    from gpufleet.preflight import require_no_errors

    view = view or RunView()
    result = RunResult(passed=False, validation=None, teardown=None)
    baker = baker_for(spec) if bake else None
    if baker is not None and baker.in_run:
        view.baked(baker.build(spec, reporter))
    try:
        require_no_errors(spec)
        state, inventory = up(spec, reporter, spec_path, replace=replace)
        view.up(state, inventory)
        view.configured(configure(spec, reporter))
        view.before_validate()
        result.validation = validate(spec, out, reporter, ledger)
        view.validated(result.validation)
        result.passed = result.validation.passed
    finally:
        if keep:
            view.kept()
        else:
            try:
                result.teardown = down(spec, reporter)
            except GpufleetError as exc:
                view.teardown_failed(exc)
                raise
            view.down(result.teardown)
            result.teardown.raise_for_leftovers()
    return result
