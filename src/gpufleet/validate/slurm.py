"""Run the validation's jobs through Slurm from the login node.

gpufleet never talks to Slurm directly: it gets an ``Executor``, anything with
``run(command, timeout) -> (exit code, stdout, stderr)`` that runs a shell command on the login node
(``gpufleet.configure.remote.SshExecutor`` over SSH; a fake in the tests). Everything here builds shell
command lines, quoted with ``shlex``, and reads what comes back.

One command builder serves GPU clusters (nccl-tests) and the local cluster (gpufleet's CPU benchmark,
installed under the same binary names, with the same flags and output format):

    srun --mpi=pmix -N <n> --ntasks-per-node=<gpus per node, or 1> [--gpus-per-node=<gpus>]
        --nodelist=<nodes> --exclusive --immediate=<s> --kill-on-bad-exit=1
        [--container-image=<staged image> --no-container-entrypoint]   (software.container_image)
        bash -c '. /etc/gpufleet/nccl.env; export NCCL_DEBUG=INFO ...; <report>; exec "$0" "$@"'
        <bindir>/<collective>_perf -b <min> -e <max> -f <factor> -g 1 -n <iters> -w <warmup> -c 1

Each task sources its node's NCCL environment file, the one the fabric role wrote (the inventory's
``gpufleet_nccl_env_file``, /etc/gpufleet/nccl.env by default), so the runs use exactly the settings
training jobs use; gpufleet adds only NCCL_DEBUG=INFO, so the transport NCCL picked can be read back.
The first task of each node prints a ``GPUFLEET_NCCL_ENV`` line (host, fabric, transport the file
configured), which the suite reads to know what transport to expect. The binary directory is the
inventory's ``gpufleet_nccl_tests_dir``.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.errors import ValidationRunError
from gpufleet.inventory.model import NCCL_ENV_FILE as DEFAULT_NCCL_ENV_FILE
from gpufleet.inventory.model import NCCL_TESTS_DIR as DEFAULT_NCCL_TESTS_DIR
from gpufleet.inventory.model import Host
from gpufleet.node import FOLDER as NODE_FILES
from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.validate.container import check_same_image, srun_options, staged_image
from gpufleet.validate.scheduler import (
    CollectiveRun,
    HealthRun,
    JobRun,
    NodeState,
    TrainingRequest,
    side_by_side,
    uniform_compute,
)
from gpufleet.validate.training_job import TrainingJob

if TYPE_CHECKING:
    from gpufleet.inventory.model import Inventory
    from gpufleet.spec.model import ClusterSpec

__all__ = [
    "DEFAULT_NCCL_ENV_FILE",
    "DEFAULT_NCCL_TESTS_DIR",
    "CollectiveRun",
    "Executor",
    "HealthRun",
    "SlurmRunner",
    "Sweep",
    "TaskEnvironment",
]

HEALTH_MARKER = "GPUFLEET_HEALTH "
HEALTH_PART_MARKER = "GPUFLEET_HEALTH_PART "


class Executor(Protocol):
    """Runs one shell command on the cluster's login node. Must be safe to call from several threads."""

    def run(self, command: str, timeout: float) -> tuple[int, str, str]: ...


# ---- the environment of each task ----------------------------------------------------------------

# The fabric role writes each compute node's NCCL settings into DEFAULT_NCCL_ENV_FILE (roles/nccl_env, the
# inventory's nccl_env_file); every task sources it, so the collective runs use what training jobs use.
# Added after the file: the transport NCCL picked must be readable in the log.
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
# Each node's first task prints one line saying which file it sourced and what that file configured.
NCCL_ENV_MARKER = "GPUFLEET_NCCL_ENV"
_NCCL_ENV_LINE = re.compile(
    NCCL_ENV_MARKER
    + r" host=(?P<host>\S+) fabric=(?P<fabric>\S*) transport=(?P<transport>\S*) file=(?P<file>\S+)"
)
# Exit code of a task whose node has no readable environment file.
NO_ENV_FILE_EXIT = 97


@dataclass(frozen=True)
class TaskEnvironment:
    """What every srun task runs in: the node's env file, sourced inside the task, then ``env``."""

    env_file: str = DEFAULT_NCCL_ENV_FILE
    env: dict[str, str] = field(default_factory=lambda: dict(DEBUG_ENV))
    # The shell expression of the node's name, and the variable that holds the task's rank on its node (the
    # first task of each node reports): Slurm's here; an MPIJob's worker writes its node's name to a file and
    # Open MPI numbers the ranks of a node (``validate.kubernetes``).
    host: str = '"${SLURMD_NODENAME:-$(hostname -s)}"'
    local_rank: str = "SLURM_LOCALID"

    def script(self) -> str:
        """The ``bash -c`` script that prepares the task and then execs it (``$0 "$@"``)."""
        path = shlex.quote(self.env_file)
        host = self.host
        report = (
            f'printf "{NCCL_ENV_MARKER} host=%s fabric=%s transport=%s file=%s\\n" {host} '
            f'"$GPUFLEET_FABRIC" "$GPUFLEET_TRANSPORT" {path} >&2'
        )
        missing = f"echo {NCCL_ENV_MARKER} host={host} missing {path} >&2; exit {NO_ENV_FILE_EXIT}"
        steps = [
            f"{{ . {path} || {{ {missing}; }}; }}",
            *(f"export {key}={shlex.quote(value)}" for key, value in self.env.items()),
            f'{{ [ "${{{self.local_rank}:-0}}" != 0 ] || {report}; }}',
            'exec "$0" "$@"',
        ]
        return "; ".join(steps)


@dataclass(frozen=True)
class NodeEnvironment:
    """What one node's first task said about its environment file."""

    host: str
    fabric: str
    transport: str
    file: str


_MISSING_ENV_LINE = re.compile(NCCL_ENV_MARKER + r" host=(?P<host>\S+) missing (?P<file>\S+)")


def parse_missing_env(log: str) -> dict[str, str]:
    """Nodes whose task found no environment file to source (node -> the path it looked for)."""
    return {match["host"]: match["file"] for match in _MISSING_ENV_LINE.finditer(log)}


def parse_env_reports(log: str) -> dict[str, NodeEnvironment]:
    """The ``GPUFLEET_NCCL_ENV`` line of each node in a run's output (srun may prefix or interleave them)."""
    found: dict[str, NodeEnvironment] = {}
    for match in _NCCL_ENV_LINE.finditer(log):
        found[match["host"]] = NodeEnvironment(
            match["host"], match["fabric"], match["transport"], match["file"]
        )
    return found


# ---- command lines --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    """nccl-tests' size sweep and iteration flags."""

    min_bytes: int = 8
    max_bytes: int = 16 << 30
    step_factor: int = 2
    iterations: int = 20
    warmup_iterations: int = 5
    check: int = 1

    @classmethod
    def from_spec(cls, validation: ValidationSpec) -> Sweep:
        return cls(
            min_bytes=validation.min_bytes,
            max_bytes=validation.max_bytes,
            step_factor=validation.step_factor,
            iterations=validation.iterations,
            warmup_iterations=validation.warmup_iterations,
        )

    def narrowed(self, min_bytes: int | None, max_bytes: int | None) -> Sweep:
        """The same sweep from ``min_bytes`` to ``max_bytes`` (a bisection runs the sizes that failed)."""
        if min_bytes is None and max_bytes is None:
            return self
        low = min_bytes if min_bytes is not None else self.min_bytes
        high = max(max_bytes if max_bytes is not None else self.max_bytes, low)
        return replace(self, min_bytes=low, max_bytes=high)

    def args(self) -> list[str]:
        return [
            "-b", str(self.min_bytes),
            "-e", str(self.max_bytes),
            "-f", str(self.step_factor),
            "-g", "1",
            "-n", str(self.iterations),
            "-w", str(self.warmup_iterations),
            "-c", str(self.check),
        ]  # fmt: skip


def _srun(
    nodes: Sequence[str],
    tasks_per_node: int,
    gpus_per_node: int,
    immediate: int,
    container_image: str | None = None,
) -> list[str]:
    argv = ["srun", "--mpi=pmix", "-N", str(len(nodes)), f"--ntasks-per-node={max(tasks_per_node, 1)}"]
    if gpus_per_node > 0:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    argv += [
        f"--nodelist={','.join(nodes)}",
        "--exclusive",
        f"--immediate={immediate}",
        "--kill-on-bad-exit=1",
        *srun_options(container_image),
    ]
    return argv


def collective_command(
    collective: str,
    nodes: Sequence[str],
    *,
    gpus_per_node: int,
    bindir: str = DEFAULT_NCCL_TESTS_DIR,
    sweep: Sweep | None = None,
    environment: TaskEnvironment | None = None,
    immediate: int = 120,
    container_image: str | None = None,
) -> str:
    """The login-node shell command that runs ``<collective>_perf`` across ``nodes``, one rank per GPU,
    each rank in the node's NCCL environment (``TaskEnvironment``); with ``container_image``, each rank
    inside that image (pyxis), where the image must hold ``bindir``."""
    if not nodes:
        raise ValueError("collective_command needs at least one node")
    binary = f"{bindir.rstrip('/')}/{collective}_perf"
    task = ["bash", "-c", (environment or TaskEnvironment()).script(), binary, *(sweep or Sweep()).args()]
    argv = _srun(nodes, gpus_per_node or 1, gpus_per_node, immediate, container_image)
    return shlex.join([*argv, *task])


def health_command(
    nodes: Sequence[str],
    fabric: FabricKind,
    *,
    script: str,
    immediate: int = 120,
    mount_point: str | None = None,
    nccl_tests_dir: str | None = None,
    nvlink: tuple[int, int] | None = None,
    env_file: str | None = None,
) -> str:
    """Run the node health script once per node (one task per node); ``mount_point``: check it too;
    ``env_file``: the NCCL environment file every rank sources, which must be there;
    ``nccl_tests_dir``: the script also makes a one-rank smoke run of the nccl-tests binaries there;
    ``nvlink`` (GPUs, bytes): and an all_reduce over the node's GPUs at that size, the task holding them."""
    argv = _srun(nodes, 1, nvlink[0] if nvlink and nccl_tests_dir else 0, immediate)
    argv.remove("--mpi=pmix")
    argv.remove("--kill-on-bad-exit=1")
    extra = ["--mount", mount_point] if mount_point else []
    extra += ["--nccl-tests", nccl_tests_dir] if nccl_tests_dir else []
    extra += ["--env-file", env_file] if env_file else []
    if nvlink and nccl_tests_dir:
        extra += ["--nvlink-gpus", str(nvlink[0]), "--nvlink-bytes", str(nvlink[1])]
    return shlex.join([*argv, "python3", "-c", script, "--fabric", fabric.value, *extra])


def sinfo_command(nodes: Sequence[str]) -> str:
    return shlex.join(["sinfo", "-N", "-h", "-o", "%N|%T|%E", f"--nodes={','.join(nodes)}"])


def drain_command(nodes: Sequence[str], reason: str) -> str:
    return shlex.join(
        ["scontrol", "update", f"nodename={','.join(nodes)}", "state=drain", f"reason={reason}"]
    )


def node_health_script() -> str:
    """The source of the per-node health check (stdlib-only Python, run with ``python3 -c``)."""
    return (NODE_FILES / "node_health.py").read_text(encoding="utf-8")


# ---- the runner -----------------------------------------------------------------------------------


@dataclass
class SlurmState:
    node: str
    state: str
    reason: str

    @property
    def usable(self) -> bool:
        base = self.state.rstrip("*~#!%$@^-+").lower()
        return base in ("idle", "allocated", "mixed", "completing") and not self.state.endswith("*")


def resume_command(node: str) -> str:
    return shlex.join(["scontrol", "update", f"nodename={node}", "state=resume"])


@dataclass
class TakenOut:
    """Nodes Slurm took out of service while the run went on (drained or down, not by gpufleet): a report
    section. A run can pass its collectives and still leave a node no job will land on, e.g. drained with
    "SlurmdSpoolDir is full" when the node's disk filled."""

    states: dict[str, SlurmState]
    passed: bool = True  # no node taken out (set from ``states``)

    def __post_init__(self) -> None:
        self.passed = not self.states

    def lines(self) -> list[str]:
        return [
            f"Slurm took {node} out during the run: {state.state}"
            + (f" ({state.reason})" if state.reason and state.reason != "none" else "")
            + f"; once its cause is fixed, return it with: {resume_command(node)}"
            for node, state in sorted(self.states.items())
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "nodes": {
                node: {"state": state.state, "reason": state.reason, "resume": resume_command(node)}
                for node, state in sorted(self.states.items())
            },
        }

    def markdown(self) -> list[str]:
        lines = [f"- {line}" for line in self.lines()]
        return ["## Nodes Slurm took out during the run: **FAIL**", "", *lines]


def taken_out(
    before: Mapping[str, NodeState], after: dict[str, SlurmState], drained_by_us: Iterable[str]
) -> TakenOut:
    """The nodes usable (or not seen) before the run that Slurm holds unusable after it, less those gpufleet
    drained itself."""
    ours = set(drained_by_us)
    return TakenOut(
        {
            node: state
            for node, state in after.items()
            if not state.usable and node not in ours and (node not in before or before[node].usable)
        }
    )


class SlurmRunner:
    """The Slurm ``Scheduler`` (``gpufleet.validate.scheduler``): submits collectives, health checks, the
    training job and drains through ``executor`` on the login node."""

    kind = "slurm"

    def __init__(
        self,
        executor: Executor,
        *,
        fabric: FabricKind,
        gpus_per_node: int,
        bindir: str = DEFAULT_NCCL_TESTS_DIR,
        environment: TaskEnvironment | None = None,
        sweep: Sweep | None = None,
        timeout: float = 1800.0,
        max_parallel: int = 16,
        container_image: str | None = None,
        hosts: Sequence[Host] = (),
        shared_mount: str | None = None,
    ) -> None:
        self.executor = executor
        self.hosts = list(hosts)
        self.shared_mount = shared_mount
        self.container_image = container_image
        self.fabric = fabric
        self.gpus_per_node = gpus_per_node
        self.bindir = bindir
        self.environment = environment or TaskEnvironment()
        self.sweep = sweep or Sweep()
        self.timeout = timeout
        self.max_parallel = max_parallel

    @classmethod
    def for_inventory(cls, spec: ClusterSpec, inventory: Inventory, executor: Executor) -> SlurmRunner:
        """The runner for the cluster ``inventory`` describes: its compute nodes, the NCCL environment file
        and nccl-tests folder the inventory names, the image the spec's jobs run inside (pyxis)."""
        gpus, _instance_type = uniform_compute(inventory.compute)
        # software.container_image: the collectives and the training check run inside the staged image, which
        # must be the one this spec names.
        check_same_image(spec.software.container_image, inventory.software)
        image = staged_image(inventory.software, inventory.filesystem)
        filesystem = inventory.filesystem
        mount = filesystem.get("mount_point") if filesystem.get("kind", "none") != "none" else None
        return cls(
            executor,
            fabric=inventory.fabric,
            gpus_per_node=gpus,
            bindir=inventory.nccl_tests_dir,
            environment=TaskEnvironment(env_file=inventory.nccl_env_file),
            sweep=Sweep.from_spec(spec.validation),
            timeout=spec.validation.timeout.total_seconds(),
            container_image=image,
            hosts=inventory.compute,
            shared_mount=str(mount) if mount else None,
        )

    def nodes(self) -> list[Host]:
        """The inventory's compute nodes (Slurm's own view of them is ``slurm_states``)."""
        return list(self.hosts)

    def _run(self, command: str, timeout: float) -> tuple[int, str, str]:
        """The executor's answer; a run it gave up on (timeout, SSH) becomes exit code 124 and its reason,
        so one hung job fails its own verdict instead of ending the whole suite without a report."""
        try:
            return self.executor.run(command, timeout)
        except ValidationRunError as exc:
            return 124, "", str(exc) + "\n"

    def command(self, nodes: Sequence[str], collective: str, sweep: Sweep | None = None) -> str:
        return collective_command(
            collective,
            nodes,
            gpus_per_node=self.gpus_per_node,
            bindir=self.bindir,
            sweep=sweep or self.sweep,
            environment=self.environment,
            container_image=self.container_image,
        )

    def run_collective(
        self,
        nodes: Sequence[str],
        collective: str,
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> CollectiveRun:
        """Run one collective across ``nodes``; ``min_bytes``/``max_bytes`` narrow the sweep."""
        command = self.command(nodes, collective, self.sweep.narrowed(min_bytes, max_bytes))
        started = time.monotonic()
        rc, stdout, stderr = self._run(command, self.timeout)
        return CollectiveRun(
            collective, tuple(nodes), command, rc, stdout, stderr, time.monotonic() - started
        )

    def run_many(
        self,
        jobs: Iterable[tuple[Sequence[str], str]],
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> list[CollectiveRun]:
        """Run several collectives at once (on disjoint node sets, so Slurm runs them side by side)."""
        return side_by_side(self.run_collective, jobs, min_bytes, max_bytes, self.max_parallel)

    def run_command(self, command: str, timeout: float) -> tuple[int, str, str]:
        """Any other job's command line (the training check's sbatch), with ``_run``'s handling of a run the
        executor gave up on."""
        return self._run(command, timeout)

    def slurm_states(self, nodes: Sequence[str]) -> dict[str, SlurmState]:
        rc, stdout, _stderr = self.executor.run(sinfo_command(nodes), 60.0)
        states: dict[str, SlurmState] = {}
        if rc != 0:
            return states
        for line in stdout.splitlines():
            parts = line.strip().split("|", 2)
            if len(parts) >= 2 and parts[0]:
                states[parts[0]] = SlurmState(parts[0], parts[1], parts[2] if len(parts) > 2 else "")
        return states

    def run_health(
        self,
        nodes: Sequence[str],
        mount_point: str | None = None,
        *,
        smoke_nccl_tests: bool = False,
        nvlink: tuple[int, int] | None = None,
    ) -> HealthRun:
        """Slurm's view of each node, then the health script on every usable node (one task per node);
        ``mount_point``: the shared filesystem to check; ``smoke_nccl_tests``: each node also runs one rank
        of the nccl-tests binaries in ``bindir``."""
        states = self.slurm_states(nodes)
        usable = [node for node in nodes if node not in states or states[node].usable]
        answers: dict[str, dict[str, Any]] = {}
        rc, stdout, stderr = 0, "", ""
        if usable:
            command = health_command(
                usable,
                self.fabric,
                script=node_health_script(),
                mount_point=mount_point,
                nccl_tests_dir=self.bindir if smoke_nccl_tests else None,
                nvlink=nvlink,
                env_file=self.environment.env_file,
            )
            rc, stdout, stderr = self._run(command, self.timeout)
            answers = parse_health_output(stdout)
        return HealthRun(states=states, answers=answers, rc=rc, stderr=stderr)

    def drain(self, nodes: Sequence[str], reason: str) -> tuple[int, str]:
        """Drain ``nodes`` so Slurm schedules nothing new on them; returns (exit code, stderr)."""
        rc, _stdout, stderr = self.executor.run(drain_command(nodes, reason), 60.0)
        return rc, stderr

    def run_training(self, request: TrainingRequest) -> JobRun:
        """examples/jobs/train.sbatch with ``sbatch --wait`` on ``request.nodes``, its files written to the
        shared filesystem (``training_job.TrainingJob``)."""
        if request.mount_point is None:
            raise ValueError("the training job on Slurm needs the shared filesystem's mount point")
        job = TrainingJob(
            request.nodes,
            request.gpus_per_node,
            request.mount_point,
            request.run_id,
            self.environment.env_file,
            venv=request.venv,
            container_image=self.container_image,
        )
        minutes = max(1, int(request.timeout // 60))
        command = job.command(request.config, time_limit_minutes=minutes)
        rc, stdout, stderr = self._run(command, request.timeout)
        return JobRun(
            f"sbatch --wait -N {len(request.nodes)} {job.folder}/train.sbatch",
            rc,
            stdout,
            stderr,
            log_header=f"sbatch {job.folder}/train.sbatch",
        )

    def cleanup(self) -> list[str]:
        """Nothing to remove: every srun step and the sbatch job end with the command that started them."""
        return []


def run_id(cluster: str) -> str:
    """A run's name: the cluster and the UTC time (the training job's folder, Kubernetes' object labels)."""
    return f"{cluster}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"


def parse_health_output(stdout: str) -> dict[str, dict[str, Any]]:
    """Pick the script's reports out of srun's output (which may be labelled or interleaved): whole JSON
    lines, and reports sent as numbered parts (``node_health.report_lines``), joined per host."""
    payloads: list[str] = []
    parts: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    for line in stdout.splitlines():
        at = line.find(HEALTH_PART_MARKER)
        if at >= 0:
            fields = line[at + len(HEALTH_PART_MARKER) :].split(" ", 3)
            if len(fields) == 4 and fields[1].isdigit() and fields[2].isdigit():
                host, index, total, chunk = fields
                parts.setdefault(host, {})[int(index)] = chunk
                totals[host] = int(total)
            continue
        at = line.find(HEALTH_MARKER)
        if at >= 0:
            payloads.append(line[at + len(HEALTH_MARKER) :])
    for host, chunks in parts.items():
        if sorted(chunks) == list(range(totals[host])):
            payloads.append("".join(chunks[index] for index in range(totals[host])))
    answers: dict[str, dict[str, Any]] = {}
    for payload in payloads:
        try:
            data = json.loads(payload)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("hostname"):
            answers[str(data["hostname"])] = data
    return answers
