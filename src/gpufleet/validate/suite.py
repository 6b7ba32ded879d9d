"""The validation suite: is this cluster fit for a training run?

``run_suite(spec, inventory, scheduler, out_dir)`` runs these phases through a ``Scheduler``
(``scheduler.py``: Slurm, or Kubernetes), each a function of the ``SuitePlan`` made from the spec, the
inventory and the scheduler before anything runs:

1. ``check_health`` (when ``validation.health_checks``): the scheduler's state of every compute node, then the
   health script on each (``node_health.py``), judged against the inventory (``judge_health.py``); on nodes
   with a GPU stack (``gpufleet_gpu_stack`` install or verify) the script also runs one rank of
   ``all_reduce_perf``, and a node where that fails (no driver, wrong CUDA) is left out of the collective
   runs;
2. ``run_collectives``: each collective of ``validation.collectives`` across all usable compute nodes, parsed
   and gated (``gate.py``) against the spec's floor or the catalog's baseline for the instance type and node
   count;
3. ``run_training`` (when ``validation.training.enabled``): the training check's job, judged by
   ``training.judge_training``;
4. ``find_and_drain``: when a collective failed and ``validation.find_bad_nodes``, the bisection
   (``bisect.py``) on that collective; then, with ``validation.drain_bad_nodes``, the scheduler drains the
   nodes it names, nodes that failed their health check and training stragglers (Slurm: ``scontrol update
   ... state=drain``; Kubernetes: cordon, taint and an annotation with the reason);
5. ``find_taken_out`` (Slurm): the nodes Slurm drained or downed itself while the run went on (a full
   SlurmdSpoolDir), with Slurm's reason and the command to resume each; any fails the run;
6. the report (JSON, Markdown, plot; ``report.py``), written once, and every raw log, in ``out_dir``.

``SuiteResult.passed`` is what ``gpufleet validate`` turns into its exit code. Whatever the scheduler made
for the runs is removed by the caller (``Scheduler.cleanup``), also when a phase fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.errors import LogParseError
from gpufleet.inventory.model import Host, Inventory
from gpufleet.spec.model import ClusterSpec, FabricKind, SchedulerKind, ValidationSpec
from gpufleet.spec.units import format_duration
from gpufleet.validate.bisect import BisectResult, ProbeResult, find_bad_nodes
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN, Check, GateConfig, SiteBaseline, Verdict, judge
from gpufleet.validate.judge_health import HealthReport, driver_branch, evaluate_health, node_floor
from gpufleet.validate.ledger import Entry, gate_baselines
from gpufleet.validate.ledger import append as append_ledger
from gpufleet.validate.ledger import read as read_ledger
from gpufleet.validate.models import TestResult
from gpufleet.validate.nccl_log import parse_text
from gpufleet.validate.report import ReportFiles, Section, write_report
from gpufleet.validate.scheduler import CollectiveRun, NodeState, Scheduler, TrainingRequest, uniform_compute
from gpufleet.validate.slurm import (
    Executor,
    SlurmRunner,
    Sweep,
    TakenOut,
    parse_env_reports,
    parse_missing_env,
    run_id,
    taken_out,
)
from gpufleet.validate.training import TrainingResult, judge_training, parse_training_log, plot_training


@dataclass
class SuiteResult:
    passed: bool
    tests: list[TestResult]
    verdicts: list[Verdict]
    runs: list[CollectiveRun]
    health: HealthReport | None
    bisection: BisectResult | None
    drained: list[str]
    report: ReportFiles
    nodes: list[str] = field(default_factory=list)
    training: TrainingResult | None = None
    taken_out: TakenOut | None = None  # nodes Slurm drained or downed during the run

    @property
    def summary(self) -> str:
        word = "PASS" if self.passed else "FAIL"
        parts = [verdict.summary for verdict in self.verdicts]
        if self.health is not None and not self.health.passed:
            parts.append(f"unhealthy nodes: {', '.join(self.health.failed_nodes)}")
        if self.bisection is not None and self.bisection.bad_nodes:
            parts.append(f"bad nodes: {', '.join(self.bisection.bad_nodes)}")
        if self.training is not None:
            parts.append(self.training.summary)
        if self.taken_out is not None:
            parts.extend(self.taken_out.lines())
        return f"{word}: " + " | ".join(parts)


# srun's own bookkeeping after a task failed: it says that a task exited, not why.
_SRUN_BOOKKEEPING = re.compile(
    r"^srun: (error: \S+: tasks? [0-9,\-]+: (Exited with exit code|Killed|Terminated)"
    r"|launch/slurm: _step_signal|Terminating StepId=|Job step aborted|error: Timed out waiting for job step"
    r"|Force Terminated)"
    # slurmstepd's notice that it cancelled the step after a task failed, which srun may forward last
    r"|^slurmstepd(-\S+)?: error: \*\*\* (STEP|JOB) \S+ ON \S+ CANCELLED AT"
    # a node whose container start the step's end killed (pyxis: error code 143 or 137, enroot's log saying
    # only Terminated or Killed), and slurmstepd's spank lines after any pyxis failure: the cause is a task's
    # own line before them, or enroot's own error that pyxis prints from its log
    r"|^slurmstepd(-\S+)?: error: (spank: required plugin \S+: task_init\(\) failed"
    r"|Failed to invoke spank plugin stack|pyxis: (printing enroot log file:"
    r"|container was not started successfully by another task"
    r"|container start failed with error code: (137|143)$|\s+(Terminated|Killed)$"
    # pyxis on Slurm 24.11's node whose step was cancelled (the local cluster's containers test, 2026-11-27)
    r"|child \d+ terminated with signal (9|15)$))"
)


def _stderr_cause(stderr: str) -> str:
    """The line of a failed run's stderr that says why: the last one that is not srun's bookkeeping (a task's
    own error, such as the loader's "cannot open shared object file", comes before srun's "task 1: Exited
    with exit code 127"); srun's last line when there is nothing else."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    causes = [line for line in lines if not _SRUN_BOOKKEEPING.match(line)]
    return (causes or lines or [""])[-1][:300]


def _failed_run_test(run: CollectiveRun, name: str, why: str) -> TestResult:
    """A stand-in result for a run whose output holds no table, so the report and the gate show it."""
    test = TestResult(file=name, collective=run.collective, collective_source="test name")
    # The cause first: a reader of the verdict table sees why before the launcher's bookkeeping.
    cause = _stderr_cause(run.stderr)
    said = f"{run.runner} exit code {run.rc}, no nccl-tests table in the output ({why})"
    test.failures.append(f"{cause} ({said})" if cause else said)
    return test


def _parse_run(run: CollectiveRun, name: str) -> list[TestResult]:
    try:
        tests = parse_text(run.log, name=name)
    except LogParseError as exc:
        return [_failed_run_test(run, name, exc.message)]
    if run.rc != 0:
        stderr = _stderr_cause(run.stderr)
        for test in tests:
            if test.failures or test.out_of_bounds or test.wrong_total:
                # nccl-tests exits non-zero when it counted errors: the gate already says why
                test.notes.append(f"{run.runner} exit code {run.rc}: {stderr}")
            else:
                test.failures.append(f"{run.runner} exit code {run.rc}: {stderr}")
    return tests


def _check_environment(run: CollectiveRun, tests: list[TestResult], fabric: FabricKind) -> str | None:
    """What the nodes' env files configured, from the run's ``GPUFLEET_NCCL_ENV`` lines: the transport to
    expect when every node of the run sourced a file written for ``fabric`` with the same transport;
    otherwise each test of the run gets a failure that names the nodes and what they said."""
    if not run.nodes:
        return None
    reports = parse_env_reports(run.log)
    problems = []
    absent = parse_missing_env(run.log)
    silent = [node for node in run.nodes if node not in reports]
    if absent:
        shown = ", ".join(f"{node} ({path})" for node, path in sorted(absent.items())[:8])
        problems.append(
            f"no NCCL environment file on {shown}: run the Fabric play (gpufleet configure), whose fabric "
            "role writes it"
        )
    elif silent and run.rc == 0:  # a run that failed for another reason says why on its own
        problems.append(
            f"{len(silent)} node(s) did not report sourcing their NCCL environment file "
            f"({', '.join(silent[:8])})"
        )
    wrong_fabric = sorted({f"{r.host}: {r.fabric or 'none'}" for r in reports.values() if r.fabric != fabric})
    if wrong_fabric:
        problems.append(
            f"the NCCL environment file was written for another fabric than {fabric.value} "
            f"({', '.join(wrong_fabric[:8])})"
        )
    transports = {report.transport for report in reports.values()}
    if len(transports) > 1:
        problems.append(
            f"the nodes' NCCL environment files select different transports: {sorted(transports)}"
        )
    for test in tests:
        test.failures[:0] = problems  # the cause goes first: a failed srun is its consequence
    return transports.pop() if len(transports) == 1 and not problems else None


def _environment_summary(runs: list[CollectiveRun]) -> str:
    """What the nodes' env files configured, as the first run that reported them says."""
    for run in runs:
        reports = parse_env_reports(run.log)
        if reports:
            kinds = sorted(
                {f"fabric {r.fabric}, transport {r.transport} ({r.file})" for r in reports.values()}
            )
            return "; ".join(kinds)
    return "not reported by any run"


def _probe_sizes(verdict: Verdict, test: TestResult, sweep: Sweep, gate_min: int) -> tuple[int, int]:
    """Sizes for bisection runs: where the cluster-wide run went wrong, and the size the gate reads."""
    judged = verdict.measured_bytes or min(max(gate_min, sweep.min_bytes), sweep.max_bytes)
    wrong = [row.size for row in test.rows if any(h is not None and h.wrong for h in (row.oop, row.ip))]
    low = min([*wrong, judged]) if wrong else judged
    high = max([*wrong, judged])
    return low, high


class Prober:
    """Runs one bisection round through the scheduler and judges each group's result with the gate."""

    def __init__(
        self,
        runner: Scheduler,
        collective: str,
        config: GateConfig,
        catalog: Catalog,
        sizes: tuple[int, int],
        out_dir: Path,
    ) -> None:
        self.runner, self.collective, self.config, self.catalog = runner, collective, config, catalog
        self.fabric = runner.fabric
        self.sizes = sizes
        self.log_dir = out_dir / "logs" / "bisect"
        self.round = 0

    def __call__(self, groups: list[list[str]]) -> list[ProbeResult]:
        self.round += 1
        runs = self.runner.run_many(
            [(group, self.collective) for group in groups], min_bytes=self.sizes[0], max_bytes=self.sizes[1]
        )
        results = []
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for index, (group, run) in enumerate(zip(groups, runs, strict=True)):
            name = f"round{self.round:02d}-{index:03d}-{self.collective}.log"
            (self.log_dir / name).write_text(f"# {run.command}\n{run.log}", encoding="utf-8")
            tests = _parse_run(run, name)
            transport = _check_environment(run, tests, self.fabric)
            config = replace(self.config, nodes=len(group), transport=transport)
            verdicts = [judge(test, config, self.catalog) for test in tests]
            failures = [check for verdict in verdicts for check in verdict.failures]
            busbw = next((v.measured_busbw for v in verdicts if v.measured_busbw is not None), None)
            reason = "; ".join(check.message for check in failures)[:400] if failures else "passed"
            results.append(ProbeResult(not failures, reason, busbw))
        return results


@dataclass(frozen=True)
class SuitePlan:
    """What the suite will run and judge against, fixed before anything runs."""

    spec: ClusterSpec
    inventory: Inventory
    scheduler: Scheduler
    catalog: Catalog
    out_dir: Path
    hosts: list[Host]
    gpus: int
    instance_type: str
    gate: GateConfig
    sweep: Sweep
    # The site's ledger (ledger.py): where this validation's figures are appended, and what was there.
    ledger: Path | None = None
    ledger_entries: list[Entry] = field(default_factory=list)

    @classmethod
    def from_inventory(
        cls,
        spec: ClusterSpec,
        inventory: Inventory,
        scheduler: Scheduler,
        out_dir: Path,
        catalog: Catalog | None = None,
        ledger: Path | None = None,
    ) -> SuitePlan:
        hosts = scheduler.nodes()
        gpus, instance_type = uniform_compute(hosts)
        fabric = scheduler.fabric
        gate = GateConfig.from_spec(
            spec.validation,
            instance_type=instance_type,
            fabric=fabric,
            require_transport=fabric is not FabricKind.ETHERNET,
            require_complete=True,
            container_image=scheduler.container_image,
        )
        catalog = catalog or load_catalog()
        sweep = Sweep.from_spec(spec.validation)
        entries = read_ledger(ledger) if ledger is not None else []
        plan = cls(spec, inventory, scheduler, catalog, out_dir, hosts, gpus, instance_type, gate, sweep)
        return replace(plan, ledger=ledger, ledger_entries=entries)

    @property
    def validation(self) -> ValidationSpec:
        return self.spec.validation

    @property
    def mount_point(self) -> str | None:
        """The inventory's shared filesystem, where it has one."""
        filesystem = self.inventory.filesystem
        mount = filesystem.get("mount_point") if filesystem.get("kind", "none") != "none" else None
        return str(mount) if mount else None


@dataclass
class Collectives:
    """What ``run_collectives`` ran and judged, and the first failed verdict (what the bisection searches)."""

    tests: list[TestResult] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    runs: list[CollectiveRun] = field(default_factory=list)
    first_failure: tuple[str, Verdict, TestResult] | None = None


@dataclass
class Drained:
    """What ``find_and_drain`` found and drained."""

    bisection: BisectResult | None = None
    nodes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_suite(
    spec: ClusterSpec,
    inventory: Inventory,
    scheduler: Scheduler | Executor,
    out_dir: Path,
    *,
    catalog: Catalog | None = None,
    ledger: Path | None = None,
) -> SuiteResult:
    """Validate the cluster ``inventory`` describes, as ``spec.validation`` asks; see the module doc.
    ``scheduler``: a ``Scheduler``, or an ``Executor`` on a Slurm login node (``SlurmRunner`` over it).
    ``ledger``: the site's ledger file, read for ``validation.baseline: ledger`` and appended to."""
    if not isinstance(scheduler, Scheduler):
        scheduler = SlurmRunner.for_inventory(spec, inventory, scheduler)
    plan = SuitePlan.from_inventory(spec, inventory, scheduler, out_dir, catalog, ledger)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    health, nodes, before = check_health(plan)
    collectives = run_collectives(plan, nodes)
    training = (
        run_training(plan, nodes, _all_reduce(collectives)) if plan.validation.training.enabled else None
    )
    drained = find_and_drain(plan, nodes, collectives, health, training)
    taken = find_taken_out(plan, before, drained)
    report = write_suite_report(plan, nodes, collectives, health, training, drained, taken)
    passed = (
        bool(collectives.verdicts)
        and all(v.passed for v in collectives.verdicts)
        and (health is None or health.passed)
        and (training is None or training.passed)
        and (taken is None or taken.passed)
    )
    append_to_ledger(plan, collectives)
    c = collectives
    return SuiteResult(
        passed,
        c.tests,
        c.verdicts,
        c.runs,
        health,
        drained.bisection,
        drained.nodes,
        report,
        nodes,
        training,
        taken,
    )


def _all_reduce(collectives: Collectives) -> TestResult | None:
    """The nccl-tests all_reduce result the training check's DDP all-reduce is compared with."""
    return next((test for test in collectives.tests if test.collective == "all_reduce"), None)


def write_suite_report(
    plan: SuitePlan,
    nodes: list[str],
    collectives: Collectives,
    health: HealthReport | None,
    training: TrainingResult | None,
    drained: Drained,
    taken: TakenOut | None,
) -> ReportFiles:
    """Phase 6: the one write of the report (JSON, Markdown, plot), with a section for each phase that
    has something to say."""
    candidates: list[tuple[str, Section | None]] = [
        ("health", health),
        ("training", training),
        ("bisection", drained.bisection),
        ("slurm_took_out", taken if taken is not None and taken.states else None),
    ]
    sections = {name: section for name, section in candidates if section is not None}
    return write_report(
        plan.out_dir,
        collectives.tests,
        collectives.verdicts,
        sections=sections,
        context=_context(plan, nodes, collectives.runs, drained),
        gate_min_bytes=plan.validation.gate_min_bytes,
    )


def append_to_ledger(plan: SuitePlan, collectives: Collectives) -> None:
    """This validation's figures, appended to the site's ledger when the plan has one."""
    if plan.ledger is not None:
        pairs = zip(collectives.tests, collectives.verdicts, strict=True)
        append_ledger(plan.ledger, [Entry.of(plan.spec.name, test, verdict) for test, verdict in pairs])


# Ready before measured (issue 33): the checks that say a node's fabric and GPUs are up, which a node may pass
# late (links training, drivers loading, the fabric manager converging). A node failing one of them is
# polled again until validation.ready_timeout; one still failing then is named and left out of every
# benchmark, as is a node the scheduler cannot run on, that did not answer, or whose nccl-tests cannot run.
READINESS = ("fabric", "gpus", "nccl_env", "gpudirect")
EXCLUDING = ("answer", "nccl_tests", *READINESS)
READY_POLL_SECONDS = 10.0
_clock = time.monotonic
_sleep = time.sleep


def _not_ready(health: HealthReport) -> dict[str, list[str]]:
    return {
        node.node: problems
        for node in health.nodes
        if (problems := [c.message for c in node.checks if c.name in READINESS and c.status == FAIL])
    }


def check_health(plan: SuitePlan) -> tuple[HealthReport | None, list[str], Mapping[str, NodeState]]:
    """Phase 1: each node's health and readiness (when ``validation.health_checks``), the nodes the
    collectives can use: all of them, less those the scheduler cannot run on, that did not answer, whose
    nccl-tests cannot run one rank, or that were not ready by ``validation.ready_timeout``; and the
    scheduler's view of each node before the run."""
    nodes = [host.name for host in plan.hosts]
    if not plan.validation.health_checks:
        return None, nodes, {}
    probe = HealthProbe(plan)
    health = _wait_until_ready(plan, probe)
    excluding = (plan.scheduler.kind, "ready", *EXCLUDING)
    unusable = {
        node.node
        for node in health.nodes
        if any(check.name in excluding and check.status == FAIL for check in node.checks)
    }
    return health, [node for node in nodes if node not in unusable], probe.states


@dataclass
class HealthProbe:
    """One round of the health script on some nodes, judged against the inventory; keeps the scheduler's
    first view of each node (its state before the run)."""

    plan: SuitePlan
    states: dict[str, NodeState] = field(default_factory=dict)

    def __call__(self, names: list[str]) -> HealthReport:
        plan = self.plan
        smoke = any(host.gpu_stack not in (None, "none") for host in plan.hosts)
        floor = next((found for host in plan.hosts if (found := node_floor(host)) is not None), None)
        run = plan.scheduler.run_health(
            names,
            mount_point=plan.mount_point,
            smoke_nccl_tests=smoke,
            nvlink=(floor.gpus, floor.message_bytes) if smoke and floor is not None else None,
        )
        hosts = [host for host in plan.hosts if host.name in names]
        for node, state in run.states.items():
            self.states.setdefault(node, state)
        branch = driver_branch(plan.inventory.software)
        return evaluate_health(hosts, run, plan.inventory.filesystem, driver_branch=branch)


def _wait_until_ready(plan: SuitePlan, probe: HealthProbe) -> HealthReport:
    """Every node's health, the nodes not ready yet probed again until ``validation.ready_timeout``; a node
    ready late says after how long, one never ready fails ``ready`` and is benchmarked nowhere."""
    started = _clock()
    deadline = started + plan.validation.ready_timeout.total_seconds()
    health = probe([host.name for host in plan.hosts])
    waiting = _not_ready(health)
    while waiting and _clock() < deadline:
        _sleep(min(READY_POLL_SECONDS, max(0.0, deadline - _clock())))
        again = {node.node: node for node in probe(sorted(waiting)).nodes}
        for index, node in enumerate(health.nodes):
            fresh = again.get(node.node)
            if fresh is None:
                continue
            if not _not_ready(HealthReport([fresh])):
                fresh.checks.insert(0, Check("ready", INFO, f"ready after {_clock() - started:.0f} s"))
            health.nodes[index] = fresh
        waiting = _not_ready(health)
    timeout = format_duration(plan.validation.ready_timeout)
    for node in health.nodes:
        if node.node in waiting:
            why = "; ".join(waiting[node.node])
            message = (
                f"not ready after {timeout} (validation.ready_timeout): {why}; nothing was benchmarked on it"
            )
            node.checks.insert(0, Check("ready", FAIL, message))
    return health


def run_collectives(plan: SuitePlan, nodes: list[str]) -> Collectives:
    """Phase 2: each collective of ``validation.collectives`` across ``nodes``, logged, parsed and gated; a
    collective that lands in the WARN tier is run once more (``validation.rerun_on_warn``), and the re-run
    decides: PASS passes, anything else fails."""
    done = Collectives()
    site: dict[str, SiteBaseline] = {}
    if plan.validation.baseline == "ledger" and plan.instance_type and nodes:
        site = gate_baselines(plan.ledger_entries, plan.instance_type, len(nodes))
    for collective in plan.validation.collectives:
        name = collective.value
        run, tests, verdicts = _run_one(plan, nodes, name, f"{name}.log", site)
        done.runs.append(run)
        if plan.validation.rerun_on_warn and any(v.tier is WARN for v in verdicts):
            first = next(v for v in verdicts if v.tier is WARN)
            run, tests, verdicts = _run_one(plan, nodes, name, f"{name}-rerun.log", site)
            done.runs.append(run)
            for verdict in verdicts:
                verdict.rerun_of = {
                    "busbw": first.measured_busbw,
                    "tier": first.tier.value,
                    "log": f"logs/{name}.log",
                }
                if verdict.tier is WARN:
                    verdict.checks.append(
                        Check(
                            "rerun",
                            FAIL,
                            f"below the pass threshold twice: {first.measured_busbw:g} GB/s, then "
                            f"{verdict.measured_busbw:g} GB/s on the re-run",
                        )
                    )
                verdict.passed = verdict.tier is PASS
        for test, verdict in zip(tests, verdicts, strict=True):
            done.tests.append(test)
            done.verdicts.append(verdict)
            if not verdict.passed and done.first_failure is None:
                done.first_failure = (name, verdict, test)
    return done


def _run_one(
    plan: SuitePlan, nodes: list[str], name: str, log_name: str, site: Mapping[str, SiteBaseline]
) -> tuple[CollectiveRun, list[TestResult], list[Verdict]]:
    """Run one collective, keep its log as ``logs/<log_name>``, parse it and judge each test."""
    if not nodes:
        run = CollectiveRun(name, (), "", 1, "", "no usable compute node left after the health checks", 0.0)
    else:
        run = plan.scheduler.run_collective(nodes, name)
    (plan.out_dir / "logs" / log_name).write_text(f"# {run.command}\n{run.log}", encoding="utf-8")
    parsed = _parse_run(run, f"logs/{log_name}")
    transport = _check_environment(run, parsed, plan.scheduler.fabric)
    config = replace(plan.gate, nodes=len(nodes), transport=transport, site_baselines=site)
    verdicts = []
    for test in parsed:
        if test.collective != name and test.collective_source == "row shape":
            test.collective_note = f"{test.collective_note}; set to {name}, the binary gpufleet ran"
            test.collective, test.collective_source = name, "command line"
        verdicts.append(judge(test, config, plan.catalog))
    return run, parsed, verdicts


def run_training(plan: SuitePlan, nodes: list[str], nccl_all_reduce: TestResult | None) -> TrainingResult:
    """Phase 3, the training check (``validation.training``): examples/jobs/train_ddp.py through the scheduler
    on ``nodes`` (Slurm: train.sbatch; Kubernetes: an MPIJob), its output kept as logs/training.log, judged by
    ``training.judge_training``."""
    config = plan.validation.training
    mount = plan.scheduler.shared_mount
    if not nodes or not mount:
        why = "no usable compute node left after the health checks" if not nodes else "no shared filesystem"
        result = TrainingResult([], list(nodes), 0)
        result.checks.append(Check("run", FAIL, f"the training job did not run: {why}"))
        return result
    request = TrainingRequest(
        tuple(nodes),
        plan.gpus,
        run_id(plan.inventory.cluster),
        config,
        plan.validation.timeout.total_seconds(),
        mount,
        venv=plan.inventory.torch_venv,
    )
    job = plan.scheduler.run_training(request)
    log_name = "logs/training.log"
    (plan.out_dir / log_name).write_text(f"# {job.log_header}\n{job.stdout}\n{job.stderr}", encoding="utf-8")
    result = judge_training(
        parse_training_log(f"{job.stdout}\n{job.stderr}"),
        config,
        nodes=list(nodes),
        ranks_per_node=max(plan.gpus, 1),
        gpu=plan.gpus > 0,
        rc=job.rc,
        stderr=job.stderr,
        nccl_all_reduce=nccl_all_reduce,
    )
    result.command = job.command
    result.log_file = log_name
    if result.per_rank:
        result.plot = plot_training(result, plan.out_dir / "training.png")
    return result


def find_and_drain(
    plan: SuitePlan,
    nodes: list[str],
    collectives: Collectives,
    health: HealthReport | None,
    training: TrainingResult | None,
) -> Drained:
    """Phase 4: the bisection on the first failed collective (``validation.find_bad_nodes``, two nodes or
    more), then, with ``validation.drain_bad_nodes``, every node it named, failed its health check or
    straggled in the training check, drained through the scheduler with the reason."""
    found = Drained()
    if collectives.first_failure is not None and plan.validation.find_bad_nodes and len(nodes) >= 2:
        name, verdict, test = collectives.first_failure
        sizes = _probe_sizes(verdict, test, plan.sweep, plan.validation.gate_min_bytes)
        prober = Prober(plan.scheduler, name, plan.gate, plan.catalog, sizes, plan.out_dir)
        found.bisection = find_bad_nodes(nodes, prober)
        found.bisection.collective = name
    if not plan.validation.drain_bad_nodes:
        return found
    bisection = found.bisection
    to_drain: dict[str, str] = {}
    if health is not None:
        for checked in health.nodes:
            if not checked.passed:
                to_drain[checked.node] = f"gpufleet health: {checked.problems[0]}"
    if bisection is not None:
        for node, why in bisection.bad_nodes.items():
            to_drain.setdefault(node, f"gpufleet {bisection.collective}: {why}")
    if training is not None:
        for node, why in training.stragglers.items():
            to_drain.setdefault(node, f"gpufleet training straggler: {why}")
    for node, reason in to_drain.items():
        rc, stderr = plan.scheduler.drain([node], reason[:200])
        if rc == 0:
            found.nodes.append(node)
        else:
            found.errors.append(f"{node}: {stderr.strip()[:200] or f'exit {rc}'}")
    if bisection is not None:
        bisection.drained = [node for node in found.nodes if node in bisection.bad_nodes]
        bisection.drain_error = "; ".join(found.errors) or None
    return found


def find_taken_out(plan: SuitePlan, before: Mapping[str, NodeState], drained: Drained) -> TakenOut | None:
    """Phase 5 (Slurm): the nodes Slurm took out of service while the run went on (a full SlurmdSpoolDir, a
    node that stopped answering), less those gpufleet drained itself: the verdicts may pass and leave a node
    no job will land on. ``None`` on a scheduler other than Slurm."""
    if not isinstance(plan.scheduler, SlurmRunner):
        return None
    return taken_out(before, plan.scheduler.slurm_states([host.name for host in plan.hosts]), drained.nodes)


def _context(
    plan: SuitePlan, nodes: list[str], runs: list[CollectiveRun], drained: Drained
) -> dict[str, Any]:
    """The report's context lines: what was validated, where, how, and what was drained."""
    context: dict[str, Any] = {
        "cluster": plan.inventory.cluster,
        "scheduler": plan.scheduler.kind,
        "instance type": plan.instance_type,
        "compute nodes": len(plan.hosts),
        "nodes in the collective runs": len(nodes),
        "GPUs per node": plan.gpus,
        "fabric": plan.scheduler.fabric.value,
        "ran inside": plan.scheduler.container_image or "the nodes themselves (no software.container_image)",
        "NCCL environment": _environment_summary(runs),
        "commands": "; ".join(run.command for run in runs if run.command),
    }
    if plan.validation.drain_bad_nodes:
        context["drained"] = ", ".join(drained.nodes) or "none"
        if drained.errors:
            context["drain errors"] = "; ".join(drained.errors)
    return context


def scheduler_for(spec: ClusterSpec, inventory: Inventory, executor: Executor | None = None) -> Scheduler:
    """The scheduler the spec's ``scheduler.kind`` names, for the cluster ``inventory`` describes (the
    Kubernetes client loads only for a Kubernetes spec). ``executor``: Slurm's way onto the login node (an
    ``Executor``; default SSH to the inventory's login)."""
    if spec.scheduler.kind is SchedulerKind.KUBERNETES:
        from gpufleet.validate.kubernetes.scheduler import KubernetesScheduler

        return KubernetesScheduler.for_spec(spec, inventory)
    if executor is None:
        from gpufleet.configure.remote import SshExecutor

        executor = SshExecutor.login(inventory)
    return SlurmRunner.for_inventory(spec, inventory, executor)
