"""The validation suite: is this cluster fit for a training run?

``run_suite(spec, inventory, executor, out_dir)``:

1. node health (when ``validation.health_checks``): Slurm's state of every compute node, then the health
   script on each (``node_health.py``), judged against the inventory (``health.py``); on nodes with a GPU
   stack (``gpufleet_gpu_stack`` install or verify) the script also runs one rank of ``all_reduce_perf``,
   and a node where that fails (no driver, wrong CUDA) is left out of the collective runs;
2. each collective of ``validation.collectives`` across all usable compute nodes, parsed and gated
   (``gate.py``) against the spec's floor or the catalog's baseline for the instance type and node count;
3. the report (JSON, Markdown, plot; ``report.py``) and every raw log, in ``out_dir``;
4. when a collective failed and ``validation.find_bad_nodes``: the bisection (``bisect.py``) on that
   collective, then, with ``validation.drain_bad_nodes``, ``scontrol update ... state=drain`` for the
   nodes it names and for nodes that failed their health check.

``SuiteResult.passed`` is what ``gpufleet validate`` turns into its exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.errors import LogParseError, ValidationRunError
from gpufleet.inventory.model import Host, Inventory
from gpufleet.spec.model import ClusterSpec, FabricKind
from gpufleet.validate.bisect import BisectResult, ProbeResult, find_bad_nodes
from gpufleet.validate.container import check_same_image, staged_image
from gpufleet.validate.gate import FAIL, Check, GateConfig, Verdict, judge
from gpufleet.validate.health import HealthReport, driver_branch, evaluate_health, node_floor
from gpufleet.validate.models import TestResult
from gpufleet.validate.nccl_log import parse_text
from gpufleet.validate.report import ReportFiles, Section, write_report
from gpufleet.validate.slurm import (
    DEFAULT_NCCL_ENV_FILE,
    DEFAULT_NCCL_TESTS_DIR,
    CollectiveRun,
    Executor,
    SlurmRunner,
    SlurmState,
    Sweep,
    TakenOut,
    TaskEnvironment,
    parse_env_reports,
    parse_missing_env,
    taken_out,
)
from gpufleet.validate.training import TrainingResult, judge_training, parse_training_log, plot_training
from gpufleet.validate.training_job import TrainingJob


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


def _gpus_per_node(hosts: list[Host]) -> int:
    counts = {host.gpus for host in hosts}
    if len(counts) > 1:
        raise ValidationRunError(
            f"compute nodes differ in GPU count ({', '.join(str(c) for c in sorted(counts))}): one "
            "nccl-tests run needs the same number of ranks on every node",
            hint="validate each node group on its own, or fix gpufleet_gpus in the inventory",
        )
    return counts.pop()


def _instance_type(hosts: list[Host]) -> str:
    types = {host.instance_type for host in hosts}
    if len(types) > 1:
        raise ValidationRunError(
            f"compute nodes are of several instance types ({', '.join(sorted(types))}); the gate needs one "
            "baseline",
            hint="validate each node group on its own",
        )
    return types.pop()


# srun's own bookkeeping after a task failed: it says that a task exited, not why.
_SRUN_BOOKKEEPING = re.compile(
    r"^srun: (error: \S+: tasks? [0-9,\-]+: (Exited with exit code|Killed|Terminated)"
    r"|launch/slurm: _step_signal|Job step aborted|error: Timed out waiting for job step|Force Terminated)"
    # slurmstepd's notice that it cancelled the step after a task failed, which srun may forward last
    r"|^slurmstepd(-\S+)?: error: \*\*\* (STEP|JOB) \S+ ON \S+ CANCELLED AT"
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
    # The cause first: a reader of the verdict table sees why before srun's bookkeeping.
    cause = _stderr_cause(run.stderr)
    said = f"srun exit code {run.rc}, no nccl-tests table in the output ({why})"
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
                test.notes.append(f"srun exit code {run.rc}: {stderr}")
            else:
                test.failures.append(f"srun exit code {run.rc}: {stderr}")
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


class SlurmProber:
    """Runs one bisection round through the runner and judges each group's result with the gate."""

    def __init__(
        self,
        runner: SlurmRunner,
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


def run_suite(
    spec: ClusterSpec,
    inventory: Inventory,
    executor: Executor,
    out_dir: Path,
    *,
    catalog: Catalog | None = None,
) -> SuiteResult:
    """Validate the cluster ``inventory`` describes, as ``spec.validation`` asks; see the module doc."""
    validation = spec.validation
    catalog = catalog or load_catalog()
    hosts = inventory.compute
    if not hosts:
        raise ValidationRunError(
            "the inventory has no compute nodes", hint="check the inventory's compute group"
        )
    gpus = _gpus_per_node(hosts)
    instance_type = _instance_type(hosts)
    fabric = inventory.fabric
    extra = inventory.extra_vars
    environment = TaskEnvironment(env_file=str(extra.get("gpufleet_nccl_env_file") or DEFAULT_NCCL_ENV_FILE))
    sweep = Sweep.from_spec(validation)
    # software.container_image: the collectives and the training check run inside the staged image, which
    # must be the one this spec names.
    check_same_image(spec.software.container_image, inventory.software)
    image = staged_image(inventory.software, inventory.filesystem)
    runner = SlurmRunner(
        executor,
        fabric=fabric,
        gpus_per_node=gpus,
        bindir=str(extra.get("gpufleet_nccl_tests_dir") or DEFAULT_NCCL_TESTS_DIR),
        environment=environment,
        sweep=sweep,
        timeout=validation.timeout.total_seconds(),
        container_image=image,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)

    nodes = [host.name for host in hosts]
    health: HealthReport | None = None
    before: dict[str, SlurmState] = {}
    if validation.health_checks:
        filesystem = inventory.filesystem
        mounted = filesystem.get("kind", "none") != "none" and filesystem.get("mount_point")
        smoke = any(host.gpu_stack not in (None, "none") for host in hosts)
        floor = next((found for host in hosts if (found := node_floor(host)) is not None), None)
        health_run = runner.run_health(
            nodes,
            mount_point=str(filesystem["mount_point"]) if mounted else None,
            smoke_nccl_tests=smoke,
            nvlink=(floor.gpus, floor.message_bytes) if smoke and floor is not None else None,
        )
        health = evaluate_health(
            hosts, health_run, filesystem, driver_branch=driver_branch(inventory.software)
        )
        before = health_run.states
        unusable = {
            node.node
            for node in health.nodes
            if any(
                check.name in ("slurm", "answer", "nccl_tests") and check.status == FAIL
                for check in node.checks
            )
        }
        nodes = [node for node in nodes if node not in unusable]

    base_config = GateConfig.from_spec(
        validation,
        instance_type=instance_type,
        fabric=fabric,
        require_transport=fabric is not FabricKind.ETHERNET,
        require_complete=True,
        container_image=image,
    )
    tests: list[TestResult] = []
    verdicts: list[Verdict] = []
    runs: list[CollectiveRun] = []
    first_failure: tuple[str, Verdict, TestResult] | None = None
    for collective in validation.collectives:
        name = collective.value
        if not nodes:
            run = CollectiveRun(
                name, (), "", 1, "", "no usable compute node left after the health checks", 0.0
            )
        else:
            run = runner.run_collective(nodes, name)
        runs.append(run)
        log_name = f"{name}.log"
        (out_dir / "logs" / log_name).write_text(f"# {run.command}\n{run.log}", encoding="utf-8")
        parsed = _parse_run(run, f"logs/{log_name}")
        transport = _check_environment(run, parsed, fabric)
        config = replace(base_config, nodes=len(nodes), transport=transport)
        for test in parsed:
            if test.collective != name and test.collective_source == "row shape":
                test.collective_note = f"{test.collective_note}; set to {name}, the binary gpufleet ran"
                test.collective, test.collective_source = name, "command line"
            verdict = judge(test, config, catalog)
            tests.append(test)
            verdicts.append(verdict)
            if not verdict.passed and first_failure is None:
                first_failure = (name, verdict, test)

    training: TrainingResult | None = None
    if validation.training.enabled:
        all_reduce = next((test for test in tests if test.collective == "all_reduce"), None)
        training = run_training(
            spec, inventory, runner, nodes, out_dir, gpus=gpus, nccl_all_reduce=all_reduce
        )

    context: dict[str, Any] = {
        "cluster": inventory.cluster,
        "instance type": instance_type,
        "compute nodes": len(hosts),
        "nodes in the collective runs": len(nodes),
        "GPUs per node": gpus,
        "fabric": fabric.value,
        "ran inside": image or "the nodes themselves (no software.container_image)",
        "NCCL environment": _environment_summary(runs),
        "commands": "; ".join(run.command for run in runs if run.command),
    }
    sections: dict[str, Section] = {}
    if health is not None:
        sections["health"] = health
    if training is not None:
        sections["training"] = training
    report = write_report(
        out_dir, tests, verdicts, sections=sections, context=context, gate_min_bytes=validation.gate_min_bytes
    )

    bisection: BisectResult | None = None
    if first_failure is not None and validation.find_bad_nodes and len(nodes) >= 2:
        name, verdict, test = first_failure
        prober = SlurmProber(
            runner,
            name,
            base_config,
            catalog,
            _probe_sizes(verdict, test, sweep, validation.gate_min_bytes),
            out_dir,
        )
        bisection = find_bad_nodes(nodes, prober)
        bisection.collective = name

    drained: list[str] = []
    if validation.drain_bad_nodes:
        to_drain: dict[str, str] = {}
        if health is not None:
            for node in health.nodes:
                if not node.passed:
                    to_drain[node.node] = f"gpufleet health: {node.problems[0]}"
        if bisection is not None:
            for node, why in bisection.bad_nodes.items():
                to_drain.setdefault(node, f"gpufleet {bisection.collective}: {why}")
        if training is not None:
            for node, why in training.stragglers.items():
                to_drain.setdefault(node, f"gpufleet training straggler: {why}")
        errors = []
        for node, reason in to_drain.items():
            rc, stderr = runner.drain([node], reason[:200])
            if rc == 0:
                drained.append(node)
            else:
                errors.append(f"{node}: {stderr.strip()[:200] or f'exit {rc}'}")
        if bisection is not None:
            bisection.drained = [node for node in drained if node in bisection.bad_nodes]
            bisection.drain_error = "; ".join(errors) or None
        context["drained"] = ", ".join(drained) or "none"
        if errors:
            context["drain errors"] = "; ".join(errors)

    if bisection is not None:
        sections["bisection"] = bisection
    # Slurm may take a node out while the run goes on (a full SlurmdSpoolDir, a node that stops answering):
    # the run's verdicts may pass and leave a node no job will land on.
    taken = taken_out(before, runner.slurm_states([host.name for host in hosts]), drained)
    if taken.states:
        sections["slurm_took_out"] = taken
    if bisection is not None or drained or taken.states:
        report = write_report(
            out_dir,
            tests,
            verdicts,
            sections=sections,
            context=context,
            gate_min_bytes=validation.gate_min_bytes,
        )
    passed = (
        bool(verdicts)
        and all(v.passed for v in verdicts)
        and (health is None or health.passed)
        and (training is None or training.passed)
        and taken.passed
    )
    return SuiteResult(
        passed, tests, verdicts, runs, health, bisection, drained, report, nodes, training, taken
    )


def run_training(
    spec: ClusterSpec,
    inventory: Inventory,
    runner: SlurmRunner,
    nodes: list[str],
    out_dir: Path,
    *,
    gpus: int,
    nccl_all_reduce: TestResult | None,
) -> TrainingResult:
    """The training check (``validation.training``): examples/jobs/train.sbatch through Slurm on ``nodes``,
    its output kept as logs/training.log, judged by ``training.judge_training``."""
    config = spec.validation.training
    filesystem = inventory.filesystem
    mount = filesystem.get("mount_point") if filesystem.get("kind", "none") != "none" else None
    if not nodes or not mount:
        why = "no usable compute node left after the health checks" if not nodes else "no shared filesystem"
        result = TrainingResult([], list(nodes), 0)
        result.checks.append(Check("run", FAIL, f"the training job did not run: {why}"))
        return result
    extra = inventory.extra_vars
    job = TrainingJob(
        tuple(nodes),
        gpus,
        str(mount),
        f"{inventory.cluster}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}",
        runner.environment.env_file,
        venv=str(extra.get("pytorch_venv") or "/opt/gpufleet/torch"),
        container_image=runner.container_image,
    )
    minutes = max(1, int(spec.validation.timeout.total_seconds() // 60))
    command = job.command(config, time_limit_minutes=minutes)
    rc, stdout, stderr = runner.run_command(command, spec.validation.timeout.total_seconds())
    log_name = "logs/training.log"
    (out_dir / log_name).write_text(
        f"# sbatch {job.folder}/train.sbatch\n{stdout}\n{stderr}", encoding="utf-8"
    )
    result = judge_training(
        parse_training_log(f"{stdout}\n{stderr}"),
        config,
        nodes=list(nodes),
        ranks_per_node=max(gpus, 1),
        gpu=gpus > 0,
        rc=rc,
        stderr=stderr,
        nccl_all_reduce=nccl_all_reduce,
    )
    result.command = f"sbatch --wait -N {len(nodes)} {job.folder}/train.sbatch"
    result.log_file = log_name
    if result.per_rank:
        result.plot = plot_training(result, out_dir / "training.png")
    return result
