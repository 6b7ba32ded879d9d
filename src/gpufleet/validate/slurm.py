"""Run the validation's jobs through Slurm from the login node.

gpufleet never talks to Slurm directly: it gets an ``Executor``, anything with
``run(command, timeout) -> (exit code, stdout, stderr)`` that runs a shell command on the login node
(``gpufleet.configure.remote.SshExecutor`` over SSH; a fake in the tests). Everything here builds shell
command lines, quoted with ``shlex``, and reads what comes back.

One command builder serves GPU clusters (nccl-tests) and the local cluster (gpufleet's CPU benchmark,
installed under the same binary names, with the same flags and output format):

    [env K=V ...] srun --mpi=pmix -N <n> --ntasks-per-node=<gpus per node, or 1> [--gpus-per-node=<gpus>]
        --nodelist=<nodes> --exclusive --immediate=<s> --kill-on-bad-exit=1
        <bindir>/<collective>_perf -b <min> -e <max> -f <factor> -g 1 -n <iters> -w <warmup> -c 1

The environment is the fabric's (``fabric_environment``: what the providers document, plus
NCCL_DEBUG=INFO so the transport NCCL picked can be read back) merged with the inventory's
``gpufleet_validation_env``; the binary directory is the inventory's ``gpufleet_nccl_tests_dir``.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpufleet.errors import ValidationRunError
from gpufleet.spec.model import FabricKind, ValidationSpec

DEFAULT_NCCL_TESTS_DIR = "/opt/nccl-tests/build"
HEALTH_MARKER = "GPUFLEET_HEALTH "


class Executor(Protocol):
    """Runs one shell command on the cluster's login node. Must be safe to call from several threads."""

    def run(self, command: str, timeout: float) -> tuple[int, str, str]: ...


# ---- per-fabric environment -----------------------------------------------------------------------

# EFA instance types whose EFA supports RDMA read, where aws-ofi-nccl wants FI_EFA_USE_DEVICE_RDMA=1
# (AWS's EFA + NCCL guides; newer libfabric turns it on by itself, setting it is harmless there).
EFA_RDMA_FAMILIES = frozenset({"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200"})

_DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}

# GPUDirect-TCPX on a3-highgpu-8g VMs: the NCCL settings Google documents for the TCPX plugin, with the
# VM interface names of a3-high (host NIC enp0s12, GPU NICs enp6s0, enp12s0, enp134s0, enp140s0).
# Interface names and CPU bindings depend on the image: override them with gpufleet_validation_env.
_TCPX = {
    "NCCL_SOCKET_IFNAME": "enp0s12",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "enp0s12",
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0,enp134s0,enp140s0",
    "NCCL_CROSS_NIC": "0",
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "1",
    "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_P2P_PCI_CHUNKSIZE": "524288",
    "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
    "NCCL_BUFFSIZE": "4194304",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_PXN_LEVEL": "0",
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "enp6s0:8-21,112-125;enp12s0:8-21,112-125;"
    "enp134s0:60-73,164-177;enp140s0:60-73,164-177",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "enp6s0:22-35,124-139;enp12s0:22-35,124-139;"
    "enp134s0:74-87,178-191;enp140s0:74-87,178-191",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
}

# GPUDirect-TCPXO on a3-megagpu-8g Slurm VMs: Google's documented recipe sources the plugin's
# nccl-env-profile.sh (tuning settings shipped with the plugin) and names the NICs.
TCPXO_LIB_DIR = "/var/lib/tcpxo/lib64"
_TCPXO = {
    "NCCL_FASTRAK_CTRL_DEV": "enp0s12",
    "NCCL_FASTRAK_IFNAME": "enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0",
    "NCCL_SOCKET_IFNAME": "enp0s12",
    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
}


@dataclass(frozen=True)
class FabricEnvironment:
    """Environment variables for every task, and shell files each task sources first (TCPXO's profile)."""

    env: dict[str, str]
    source: tuple[str, ...] = ()
    source_env: dict[str, str] = field(default_factory=dict)  # set before sourcing (e.g. NCCL_LIB_DIR)


def fabric_environment(
    fabric: FabricKind, instance_type: str | None = None, extra: Mapping[str, Any] | None = None
) -> FabricEnvironment:
    """The documented settings for ``fabric``, with ``extra`` (the inventory's) winning on conflicts."""
    env: dict[str, str] = {}
    source: tuple[str, ...] = ()
    source_env: dict[str, str] = {}
    if fabric is FabricKind.EFA:
        env["FI_PROVIDER"] = "efa"
        family = (instance_type or "").split(".", 1)[0]
        if family in EFA_RDMA_FAMILIES:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    elif fabric is FabricKind.TCPX:
        env.update(_TCPX)
    elif fabric is FabricKind.TCPXO:
        env.update(_TCPXO)
        source = (f"{TCPXO_LIB_DIR}/nccl-env-profile.sh",)
        source_env = {"NCCL_LIB_DIR": TCPXO_LIB_DIR}
    env.update(_DEBUG)  # every fabric: the transport must be readable in the log
    for key, value in (extra or {}).items():
        env[str(key)] = str(value)
    return FabricEnvironment(env, source, source_env)


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


def _srun(nodes: Sequence[str], tasks_per_node: int, gpus_per_node: int, immediate: int) -> list[str]:
    argv = ["srun", "--mpi=pmix", "-N", str(len(nodes)), f"--ntasks-per-node={max(tasks_per_node, 1)}"]
    if gpus_per_node > 0:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    argv += [
        f"--nodelist={','.join(nodes)}",
        "--exclusive",
        f"--immediate={immediate}",
        "--kill-on-bad-exit=1",
    ]
    return argv


def _with_environment(task: list[str], environment: FabricEnvironment) -> tuple[list[str], list[str]]:
    """Returns (prefix before srun, task argv). Sourced files run inside each task, then our env wins."""
    if not environment.source:
        prefix = (
            ["env", *(f"{key}={value}" for key, value in environment.env.items())] if environment.env else []
        )
        return prefix, task
    steps = [f"export {key}={shlex.quote(value)}" for key, value in environment.source_env.items()]
    steps += [f"source {shlex.quote(path)}" for path in environment.source]
    steps += [f"export {key}={shlex.quote(value)}" for key, value in environment.env.items()]
    script = "; ".join(steps) + '; exec "$0" "$@"'
    return [], ["bash", "-c", script, *task]


def collective_command(
    collective: str,
    nodes: Sequence[str],
    *,
    gpus_per_node: int,
    bindir: str = DEFAULT_NCCL_TESTS_DIR,
    sweep: Sweep | None = None,
    environment: FabricEnvironment | None = None,
    immediate: int = 120,
) -> str:
    """The login-node shell command that runs ``<collective>_perf`` across ``nodes``, one rank per GPU."""
    if not nodes:
        raise ValueError("collective_command needs at least one node")
    binary = f"{bindir.rstrip('/')}/{collective}_perf"
    task = [binary, *(sweep or Sweep()).args()]
    prefix, task = _with_environment(task, environment or FabricEnvironment({}))
    return shlex.join([*prefix, *_srun(nodes, gpus_per_node or 1, gpus_per_node, immediate), *task])


def health_command(
    nodes: Sequence[str],
    fabric: FabricKind,
    *,
    script: str,
    immediate: int = 120,
    nccl_tests_dir: str | None = None,
) -> str:
    """Run the node health script once per node (one task per node); with ``nccl_tests_dir``, the script
    also makes a one-rank smoke run of the nccl-tests binaries there."""
    argv = _srun(nodes, 1, 0, immediate)
    argv.remove("--mpi=pmix")
    argv.remove("--kill-on-bad-exit=1")
    smoke = ["--nccl-tests", nccl_tests_dir] if nccl_tests_dir else []
    return shlex.join([*argv, "python3", "-c", script, "--fabric", fabric.value, *smoke])


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


class SlurmRunner:
    """Submits collectives, health checks and drains through ``executor`` on the login node."""

    def __init__(
        self,
        executor: Executor,
        *,
        fabric: FabricKind,
        gpus_per_node: int,
        bindir: str = DEFAULT_NCCL_TESTS_DIR,
        environment: FabricEnvironment | None = None,
        sweep: Sweep | None = None,
        timeout: float = 1800.0,
        max_parallel: int = 16,
    ) -> None:
        self.executor = executor
        self.fabric = fabric
        self.gpus_per_node = gpus_per_node
        self.bindir = bindir
        self.environment = environment or fabric_environment(fabric)
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

    def run_health(self, nodes: Sequence[str], *, smoke_nccl_tests: bool = False) -> HealthRun:
        """Slurm's view of each node, then the health script on every usable node (one task per node);
        ``smoke_nccl_tests``: each node also runs one rank of the nccl-tests binaries in ``bindir``."""
        states = self.slurm_states(nodes)
        usable = [node for node in nodes if node not in states or states[node].usable]
        answers: dict[str, dict[str, Any]] = {}
        rc, stdout, stderr = 0, "", ""
        if usable:
            command = health_command(
                usable,
                self.fabric,
                script=node_health_script(),
                nccl_tests_dir=self.bindir if smoke_nccl_tests else None,
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
    """Pick the script's JSON lines out of srun's output (which may be labelled or interleaved)."""
    answers: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        at = line.find(HEALTH_MARKER)
        if at < 0:
            continue
        try:
            data = json.loads(line[at + len(HEALTH_MARKER) :])
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("hostname"):
            answers[str(data["hostname"])] = data
    return answers
