"""The scheduler seam: everything the validation suite asks of whatever runs its jobs.

The suite (``suite.py``) plans, gates, bisects, judges the training run and writes the report the same way on
every cluster; a ``Scheduler`` is the part that differs:

- ``slurm.SlurmRunner``: srun and sbatch on the login node, through an ``Executor`` (SSH);
- ``kubernetes.scheduler.KubernetesScheduler``: pods and MPIJobs (``kubeflow.org/v2beta1``) through the
  Kubernetes API of a cluster the user hands over.

A scheduler returns each job's output unchanged (``CollectiveRun``: the nccl-tests log as the ranks printed
it; ``JobRun``: the training job's), so one parser reads both. ``suite.scheduler_for`` picks one from the
spec's ``scheduler.kind``; the Kubernetes client is imported only there, so Slurm runs never load it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gpufleet.errors import ValidationRunError
from gpufleet.inventory.model import TORCH_VENV, Host
from gpufleet.spec.model import FabricKind, TrainingCheck


@dataclass
class CollectiveRun:
    """One run of a collective: what ran, its exit code and its output (stdout, then stderr)."""

    collective: str
    nodes: tuple[str, ...]
    command: str
    rc: int
    stdout: str
    stderr: str
    seconds: float
    runner: str = "srun"  # what ran the ranks and gave the exit code, as failure messages name it

    @property
    def log(self) -> str:
        return self.stdout if not self.stderr else f"{self.stdout.rstrip(chr(10))}\n{self.stderr}"


class NodeState(Protocol):
    """The scheduler's own view of one node (Slurm's state, Kubernetes' Ready condition and cordon)."""

    @property
    def node(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def usable(self) -> bool: ...


@dataclass
class HealthRun:
    """The health script's answers per node, with the scheduler's view of each node."""

    states: Mapping[str, NodeState]
    answers: dict[str, dict[str, Any]]  # hostname -> the JSON line the script printed
    rc: int
    stderr: str
    scheduler: str = "slurm"  # names the node-state check ("Slurm state idle", "Kubernetes node Ready")


@dataclass(frozen=True)
class TrainingRequest:
    """The training check's job (``validation.training``), as the suite asks any scheduler to run it."""

    nodes: tuple[str, ...]
    gpus_per_node: int
    run_id: str
    config: TrainingCheck
    timeout: float
    mount_point: str | None  # the shared filesystem the checkpoint goes to (Slurm); None: the scheduler's own
    venv: str = TORCH_VENV


@dataclass
class JobRun:
    """One job that is not a collective (the training check): what ran, and its output unchanged."""

    command: str
    rc: int
    stdout: str
    stderr: str
    log_header: str = ""  # the first line of the kept log (what a user would type to run it again)


@runtime_checkable
class Scheduler(Protocol):
    """What the suite asks a scheduler. Must be safe to call from several threads (bisection rounds)."""

    kind: str  # "slurm" or "kubernetes": the report's context
    fabric: FabricKind
    container_image: str | None  # the image the jobs run inside; None: on the nodes themselves
    shared_mount: str | None  # one filesystem every rank sees (the training checkpoint); None: none

    def nodes(self) -> list[Host]:
        """The compute nodes, with their GPU and fabric device counts."""
        ...

    def run_health(
        self,
        nodes: Sequence[str],
        mount_point: str | None = None,
        *,
        smoke_nccl_tests: bool = False,
        nvlink: tuple[int, int] | None = None,
    ) -> HealthRun:
        """The scheduler's view of each node, then the health script once on every usable node; with
        ``nvlink`` (GPUs, bytes) each node also runs an all_reduce over its GPUs at that size."""
        ...

    def run_collective(
        self,
        nodes: Sequence[str],
        collective: str,
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> CollectiveRun:
        """``<collective>_perf`` across ``nodes``, one rank per GPU; its output returned unchanged."""
        ...

    def run_many(
        self,
        jobs: Iterable[tuple[Sequence[str], str]],
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> list[CollectiveRun]:
        """Several collectives side by side on disjoint node sets (a bisection round)."""
        ...

    def run_training(self, request: TrainingRequest) -> JobRun:
        """The training check's job (examples/jobs/train_ddp.py) on ``request.nodes``."""
        ...

    def drain(self, nodes: Sequence[str], reason: str) -> tuple[int, str]:
        """Keep new work off ``nodes`` with ``reason``; returns (exit code, error)."""
        ...

    def cleanup(self) -> list[str]:
        """Remove whatever the runs left with the scheduler; return what is still there (empty: nothing)."""
        ...


def uniform_compute(hosts: Sequence[Host]) -> tuple[int, str]:
    """(GPUs per node, instance type) of the compute nodes, which one nccl-tests run and one baseline need
    to be the same on every node."""
    if not hosts:
        raise ValidationRunError(
            "the inventory has no compute nodes", hint="check the inventory's compute group"
        )
    counts = {host.gpus for host in hosts}
    if len(counts) > 1:
        raise ValidationRunError(
            f"compute nodes differ in GPU count ({', '.join(str(c) for c in sorted(counts))}): one "
            "nccl-tests run needs the same number of ranks on every node",
            hint="validate each node group on its own, or fix gpufleet_gpus in the inventory",
        )
    types = {host.instance_type for host in hosts}
    if len(types) > 1:
        raise ValidationRunError(
            f"compute nodes are of several instance types ({', '.join(sorted(types))}); the gate needs one "
            "baseline",
            hint="validate each node group on its own",
        )
    return counts.pop(), types.pop()


RunOne = Callable[..., CollectiveRun]


def side_by_side(
    run: RunOne,
    jobs: Iterable[tuple[Sequence[str], str]],
    min_bytes: int | None,
    max_bytes: int | None,
    max_parallel: int = 16,
) -> list[CollectiveRun]:
    """``run(nodes, collective, min_bytes=..., max_bytes=...)`` for each job at once, in threads (the jobs'
    node sets are disjoint, so the scheduler runs them side by side); the results in the jobs' order."""
    jobs = list(jobs)
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(jobs)))) as pool:
        futures = [
            pool.submit(run, nodes, collective, min_bytes=min_bytes, max_bytes=max_bytes)
            for nodes, collective in jobs
        ]
        return [future.result() for future in futures]
