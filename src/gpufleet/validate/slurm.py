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
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpufleet.errors import ValidationRunError
from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.validate.container import srun_options

DEFAULT_NCCL_TESTS_DIR = "/opt/nccl-tests/build"
HEALTH_MARKER = "GPUFLEET_HEALTH "
HEALTH_PART_MARKER = "GPUFLEET_HEALTH_PART "


class Executor(Protocol):
    """Runs one shell command on the cluster's login node. Must be safe to call from several threads."""

    def run(self, command: str, timeout: float) -> tuple[int, str, str]: ...


# ---- the environment of each task ----------------------------------------------------------------

# The fabric role writes each compute node's NCCL settings into this file (roles/nccl_env); every task
# sources it, so the collective runs use exactly what training jobs use.
DEFAULT_NCCL_ENV_FILE = "/etc/gpufleet/nccl.env"
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

    def script(self) -> str:
        """The ``bash -c`` script that prepares the task and then execs it (``$0 "$@"``)."""
        path = shlex.quote(self.env_file)
        host = '"${SLURMD_NODENAME:-$(hostname -s)}"'
        report = (
            f'printf "{NCCL_ENV_MARKER} host=%s fabric=%s transport=%s file=%s\\n" {host} '
            f'"$GPUFLEET_FABRIC" "$GPUFLEET_TRANSPORT" {path} >&2'
        )
        missing = f"echo {NCCL_ENV_MARKER} host={host} missing {path} >&2; exit {NO_ENV_FILE_EXIT}"
        steps = [
            f"{{ . {path} || {{ {missing}; }}; }}",
            *(f"export {key}={shlex.quote(value)}" for key, value in self.env.items()),
            f'{{ [ "${{SLURM_LOCALID:-0}}" != 0 ] || {report}; }}',
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
) -> str:
    """Run the node health script once per node (one task per node); ``mount_point``: check it too;
    ``nccl_tests_dir``: the script also makes a one-rank smoke run of the nccl-tests binaries there;
    ``nvlink`` (GPUs, bytes): and an all_reduce over the node's GPUs at that size, the task holding them."""
    argv = _srun(nodes, 1, nvlink[0] if nvlink and nccl_tests_dir else 0, immediate)
    argv.remove("--mpi=pmix")
    argv.remove("--kill-on-bad-exit=1")
    extra = ["--mount", mount_point] if mount_point else []
    extra += ["--nccl-tests", nccl_tests_dir] if nccl_tests_dir else []
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
    return (Path(__file__).with_name("node_health.py")).read_text(encoding="utf-8")


# ---- the runner -----------------------------------------------------------------------------------


@dataclass
class CollectiveRun:
    """One srun of a collective: what ran, its exit code and its output (stdout, then stderr)."""

    collective: str
    nodes: tuple[str, ...]
    command: str
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def log(self) -> str:
        return self.stdout if not self.stderr else f"{self.stdout.rstrip(chr(10))}\n{self.stderr}"


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
    before: dict[str, SlurmState], after: dict[str, SlurmState], drained_by_us: Iterable[str]
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
    """Submits collectives, health checks and drains through ``executor`` on the login node."""

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
    ) -> None:
        self.executor = executor
        self.container_image = container_image
        self.fabric = fabric
        self.gpus_per_node = gpus_per_node
        self.bindir = bindir
        self.environment = environment or TaskEnvironment()
        self.sweep = sweep or Sweep()
        self.timeout = timeout
        self.max_parallel = max_parallel

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
        sweep = self.sweep
        if min_bytes is not None or max_bytes is not None:
            low = min_bytes if min_bytes is not None else sweep.min_bytes
            high = max(max_bytes if max_bytes is not None else sweep.max_bytes, low)
            sweep = Sweep(
                low, high, sweep.step_factor, sweep.iterations, sweep.warmup_iterations, sweep.check
            )
        command = self.command(nodes, collective, sweep)
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
        jobs = list(jobs)
        if not jobs:
            return []
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel, len(jobs)))) as pool:
            futures = [
                pool.submit(self.run_collective, nodes, collective, min_bytes=min_bytes, max_bytes=max_bytes)
                for nodes, collective in jobs
            ]
            return [future.result() for future in futures]

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
            )
            rc, stdout, stderr = self._run(command, self.timeout)
            answers = parse_health_output(stdout)
        return HealthRun(states=states, answers=answers, rc=rc, stderr=stderr)

    def drain(self, nodes: Sequence[str], reason: str) -> tuple[int, str]:
        """Drain ``nodes`` so Slurm schedules nothing new on them; returns (exit code, stderr)."""
        rc, _stdout, stderr = self.executor.run(drain_command(nodes, reason), 60.0)
        return rc, stderr


@dataclass
class HealthRun:
    states: dict[str, SlurmState]
    answers: dict[str, dict[str, Any]]  # hostname -> the JSON line the script printed
    rc: int
    stderr: str


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
