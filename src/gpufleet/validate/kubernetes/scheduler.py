"""The Kubernetes ``Scheduler``: the suite's jobs as pods and MPIJobs on a cluster the user handed over.

- ``nodes``: the nodes ``gpufleet.kube.survey`` found, with the GPUs and fabric devices they advertise;
- ``run_health``: each node's Ready condition and cordon, then one pod per usable node running the health
  script (``node_health.py``, the same file Slurm nodes run), its log read by the same parser;
- ``run_collective``: an MPIJob (``manifests.mpijob``) whose launcher runs nccl-tests with ``mpirun`` over one
  worker per node, each rank in the node's NCCL environment (the ConfigMap's ``nccl.env``, sourced by the same
  task script Slurm's ranks run); the launcher's log is returned unchanged, with its exit code;
- ``run_training``: examples/jobs/train_ddp.py under torchrun, one worker per node, as an MPIJob;
- ``drain``: cordon, a ``gpufleet.io/drained=true:NoSchedule`` taint and the reason in the
  ``gpufleet.io/drain-reason`` annotation (opt-in, ``validation.drain_bad_nodes``, as Slurm's drain is);
  ``kubectl uncordon NODE && kubectl taint nodes NODE gpufleet.io/drained-`` undoes it;
- ``cleanup``: delete every object labelled with the run's id, then list again until none is left (what
  remains past the deadline is returned, and ``gpufleet validate`` exits 9).

Pods are polled (``poll_s``) until they end or ``validation.timeout`` passes; a pod that cannot start says why
(unschedulable, image pull) in the run's error, so a run that never started fails its own verdict.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.errors import ValidationRunError
from gpufleet.inventory.model import Host, Inventory
from gpufleet.kube.api import KubeApi
from gpufleet.kube.cleanup import CONFIGMAPS, MPIJOBS, PODS, delete_and_prove
from gpufleet.kube.survey import READY_HINT, KubeNode, parse_node
from gpufleet.spec.model import ClusterSpec, FabricKind, KubernetesOptions
from gpufleet.validate.kubernetes import manifests as m
from gpufleet.validate.scheduler import CollectiveRun, HealthRun, JobRun, TrainingRequest, side_by_side
from gpufleet.validate.slurm import Sweep, TaskEnvironment, node_health_script, parse_health_output

if TYPE_CHECKING:
    from gpufleet.configure.nccl_env import NcclEnvFile

Json = dict[str, Any]
DRAIN_TAINT = {"key": "gpufleet.io/drained", "value": "true", "effect": "NoSchedule"}
DRAIN_ANNOTATION = "gpufleet.io/drain-reason"
LAUNCHER = "mpirun (MPIJob launcher)"


# Each rank sources the run's nccl.env (the ConfigMap's), as Slurm's ranks source the node's file; the first
# rank of each worker reports it with the worker's node name.
RANK_ENVIRONMENT = TaskEnvironment(
    env_file=m.NCCL_ENV, host=m.NODE_NAME_EXPR, local_rank="OMPI_COMM_WORLD_LOCAL_RANK"
)


def collective_command(
    nodes: Sequence[str], collective: str, sweep: Sweep, gpus_per_node: int, nccl_tests_dir: str
) -> list[str]:
    """The launcher's mpirun for one collective over ``nodes``: one rank per GPU (one per node without GPUs),
    each in ``RANK_ENVIRONMENT``, running ``<nccl_tests_dir>/<collective>_perf`` with the sweep's flags."""
    slots = max(gpus_per_node, 1)
    binary = f"{nccl_tests_dir.rstrip('/')}/{collective}_perf"
    task = ["bash", "-c", RANK_ENVIRONMENT.script(), binary, *sweep.args()]
    return m.mpirun(len(nodes) * slots, slots, task)


@dataclass(frozen=True)
class NodeView:
    """A node's state as the health check shows it (``scheduler.NodeState``)."""

    node: str
    state: str
    reason: str
    ready: bool

    @property
    def usable(self) -> bool:
        return self.ready


def node_view(node: KubeNode) -> NodeView:
    state = "Ready" if node.ready else "NotReady"
    if node.unschedulable:
        state += ",SchedulingDisabled"
    return NodeView(node.name, state, node.reason or "none", node.ready and not node.unschedulable)


@dataclass
class _Created:
    """What this run made (its names), for cleanup and for the leftovers' message."""

    jobs: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class KubernetesScheduler:
    kind = "kubernetes"

    def __init__(
        self,
        api: KubeApi,
        options: KubernetesOptions,
        *,
        plan: m.RunPlan,
        fabric: FabricKind,
        hosts: Sequence[Host],
        env_file: NcclEnvFile,
        sweep: Sweep,
        dcgm_host: bool = False,
        poll_s: float = 2.0,
        cleanup_s: float = 180.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api, self.options, self.plan = api, options, plan
        self.fabric = fabric
        self.hosts = list(hosts)
        self.env_file = env_file
        self.sweep = sweep
        self.dcgm_host = dcgm_host
        self.poll_s, self.cleanup_s, self.sleep = poll_s, cleanup_s, sleep
        self.container_image: str | None = options.image
        self.shared_mount: str | None = m.SHARED_DIR if options.shared_volume else None
        self.environment = RANK_ENVIRONMENT
        self._files_made = False
        self._created = _Created()
        self._sequence = 0

    # ---- construction ------------------------------------------------------------------------------

    @classmethod
    def for_spec(
        cls, spec: ClusterSpec, inventory: Inventory, api: KubeApi | None = None
    ) -> KubernetesScheduler:
        """The scheduler for the handed-over cluster: survey it (refusing it with every missing piece named),
        then render the run's NCCL environment from the fabric role."""
        from gpufleet.catalog import load_catalog
        from gpufleet.configure.nccl_env import render
        from gpufleet.kube.api import api_for
        from gpufleet.kube.survey import survey
        from gpufleet.validate.slurm import run_id

        options = spec.scheduler.kubernetes
        assert options is not None
        api = api or api_for(spec)
        found = survey(api, spec, load_catalog())
        refusal = found.refusal(api.host)
        if refusal:
            raise ValidationRunError(refusal, hint=READY_HINT)
        instance_type = spec.compute_groups[0].instance_type
        hosts = found.hosts(instance_type)
        ansible = inventory.to_ansible()["all"]
        host_vars = dict(ansible["vars"])
        compute = (ansible["children"].get("compute") or {}).get("hosts") or {}
        if compute:
            host_vars.update(next(iter(compute.values())))
        env_file = render(spec.fabric.kind.value, host_vars, hostname=f"{spec.name} pods", path=m.NCCL_ENV)
        gpus = hosts[0].gpus if hosts else 0
        plan = m.RunPlan(
            cluster=spec.name,
            run_id=_run_name(run_id(spec.name)),
            namespace=options.namespace,
            image=options.image,
            gpus_per_node=gpus,
            devices=dict(found.devices),
            shared_volume=options.shared_volume,
            timeout_s=int(spec.validation.timeout.total_seconds()),
        )
        return cls(
            api,
            options,
            plan=plan,
            fabric=spec.fabric.kind,
            hosts=hosts,
            env_file=env_file,
            sweep=Sweep.from_spec(spec.validation),
            dcgm_host=found.dcgm_host,
        )

    def nodes(self) -> list[Host]:
        return list(self.hosts)

    # ---- the run's files ---------------------------------------------------------------------------

    def _path(self, template: str) -> str:
        return template.format(ns=self.plan.namespace)

    def ensure_files(self) -> None:
        """The run's ConfigMap (the NCCL environment, the health script, the training job), made once (the
        bisection's jobs of a round start in threads)."""
        from gpufleet.validate.training_job import SCRIPT, job_dir

        with self._created.lock:
            if self._files_made:
                return
            files = {"nccl.env": self.env_file.text, "node_health.py": node_health_script()}
            # Without examples/jobs here the training check cannot run; it says so when it is asked for.
            with contextlib.suppress(ValidationRunError):
                files["train_ddp.py"] = (job_dir() / SCRIPT).read_text(encoding="utf-8")
            self.api.create(self._path(CONFIGMAPS), m.files_config_map(self.plan, files))
            self._files_made = True

    # ---- health ------------------------------------------------------------------------------------

    def run_health(
        self,
        nodes: Sequence[str],
        mount_point: str | None = None,
        *,
        smoke_nccl_tests: bool = False,
        nvlink: tuple[int, int] | None = None,
    ) -> HealthRun:
        views = {view.node: view for view in self._node_views(nodes)}
        usable = [node for node in nodes if node not in views or views[node].usable]
        if not usable:
            return HealthRun(views, {}, 0, "", scheduler=self.kind)
        self.ensure_files()
        args = ["--fabric", self.fabric.value, "--skip", "services"]
        if smoke_nccl_tests:
            args += ["--nccl-tests", self.options.nccl_tests_dir]
            if nvlink:  # the pod holds the node's GPUs (plan.resources): node_health.py runs it in-process
                args += ["--nvlink-gpus", str(nvlink[0]), "--nvlink-bytes", str(nvlink[1])]
        pods = [
            m.health_pod(self.plan, index, node, args, dcgm_host=self.dcgm_host)
            for index, node in enumerate(usable)
        ]
        for pod in pods:
            self.api.create(self._path(PODS), pod)
        names = [pod["metadata"]["name"] for pod in pods]
        ended, why = self._wait_pods(names)
        stdout, rc = "", 0
        for name in names:
            done = ended.get(name)
            code = _exit_code(done) if done is not None else None
            if code is not None:
                stdout += self.api.log(self.plan.namespace, name) + "\n"
            rc = max(rc, 124 if code is None else code)
        for name in names:
            self.api.delete(f"{self._path(PODS)}/{name}")
        return HealthRun(views, parse_health_output(stdout), rc, "\n".join(why), scheduler=self.kind)

    def _node_views(self, nodes: Sequence[str]) -> list[NodeView]:
        views = []
        for node in nodes:
            item = self.api.get_or_none(f"/api/v1/nodes/{node}")
            if item is None:
                views.append(NodeView(node, "absent", "the node is no longer in the cluster", False))
            else:
                views.append(node_view(parse_node(item)))
        return views

    def _wait_pods(self, names: Sequence[str]) -> tuple[dict[str, Json], list[str]]:
        """The pods that ended (Succeeded or Failed), and why the others did not before the deadline."""
        deadline = time.monotonic() + self.plan.timeout_s
        ended: dict[str, Json] = {}
        pods: dict[str, Json] = {}
        waits = _waits(self.poll_s)
        while True:
            for name in names:
                if name in ended:
                    continue
                pod = self.api.get_or_none(f"{self._path(PODS)}/{name}") or {}
                pods[name] = pod
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    ended[name] = pod
            if len(ended) == len(names) or time.monotonic() >= deadline:
                break
            self.sleep(next(waits))
        why = [
            f"pod {name} did not end: {_pod_problem(pods.get(name) or {})}"
            for name in names
            if name not in ended
        ]
        return ended, why

    # ---- collectives -------------------------------------------------------------------------------

    def _job_name(self, part: str) -> str:
        with self._created.lock:
            self._sequence += 1
            name = f"{self.plan.run_id}-{part[:4]}{self._sequence}"
            self._created.jobs.append(name)
        return name

    def collective_command(self, nodes: Sequence[str], collective: str, sweep: Sweep) -> list[str]:
        return collective_command(
            nodes, collective, sweep, self.plan.gpus_per_node, self.options.nccl_tests_dir
        )

    def run_collective(
        self,
        nodes: Sequence[str],
        collective: str,
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> CollectiveRun:
        command = self.collective_command(nodes, collective, self.sweep.narrowed(min_bytes, max_bytes))
        started = time.monotonic()
        name = self._job_name("collective")
        rc, log, why = self._run_mpijob(
            name, "collective", nodes, command, slots=max(self.plan.gpus_per_node, 1)
        )
        return CollectiveRun(
            collective, tuple(nodes), shlex.join(command), rc, log, why, time.monotonic() - started, LAUNCHER
        )

    def run_many(
        self,
        jobs: Iterable[tuple[Sequence[str], str]],
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> list[CollectiveRun]:
        """A bisection round: one MPIJob per node set, side by side."""
        return side_by_side(self.run_collective, jobs, min_bytes, max_bytes)

    def _run_mpijob(
        self, name: str, part: str, nodes: Sequence[str], command: Sequence[str], *, slots: int
    ) -> tuple[int, str, str]:
        """Create the MPIJob ``name``, wait for it to end, read its launcher's log and exit code, delete it:
        (exit code, log, why it failed where the log cannot say)."""
        self.ensure_files()
        self.api.create(self._path(MPIJOBS), m.mpijob(self.plan, name, part, nodes, command, slots=slots))
        try:
            job, why = self._wait_job(name)
            launcher = self._launcher_pod(name)
            log = self.api.log(self.plan.namespace, launcher["metadata"]["name"]) if launcher else ""
            code = _exit_code(launcher) if launcher else None
            if code is None:
                code = 0 if _condition(job, "Succeeded") else 124 if why else 1
            if code != 0 and not why:
                why = _job_problem(job, launcher)
            return code, log, why
        finally:
            self.api.delete(f"{self._path(MPIJOBS)}/{name}")

    def _wait_job(self, name: str) -> tuple[Json, str]:
        deadline = time.monotonic() + self.plan.timeout_s
        job: Json = {}
        waits = _waits(self.poll_s)
        while time.monotonic() < deadline:
            job = self.api.get_or_none(f"{self._path(MPIJOBS)}/{name}") or {}
            if _condition(job, "Succeeded") or _condition(job, "Failed"):
                return job, ""
            self.sleep(next(waits))
        pods = self.api.list(self._path(PODS), f"training.kubeflow.org/job-name={name}")
        stuck = "; ".join(f"{p['metadata']['name']}: {_pod_problem(p)}" for p in pods) or "no pod was created"
        return job, f"MPIJob {name} did not end within {self.plan.timeout_s} s (validation.timeout): {stuck}"

    def _launcher_pod(self, name: str) -> Json | None:
        selector = f"training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=launcher"
        pods = self.api.list(self._path(PODS), selector)
        ended = [pod for pod in pods if _exit_code(pod) is not None]
        chosen = ended or pods
        return chosen[-1] if chosen else None

    # ---- training ----------------------------------------------------------------------------------

    def run_training(self, request: TrainingRequest) -> JobRun:
        """train_ddp.py under torchrun on each of ``request.nodes`` (the rendezvous on the first worker), its
        checkpoint on the shared volume. The log's pod host names are replaced by the nodes they ran on, so
        the
        judge names nodes, as on Slurm."""
        name = self._job_name("training")
        folder = f"{m.SHARED_DIR}/.gpufleet/training/{request.run_id}"
        settings = {
            "TRAIN_CHECKPOINT_DIR": f"{folder}/checkpoints",
            "TRAIN_STEPS": str(request.config.steps),
            "TRAIN_CHECKPOINT_EVERY": str(request.config.checkpoint_every),
            "TRAIN_JOIN_TIMEOUT": str(int(request.config.join_timeout.total_seconds())),
        }
        task = m.training_task(
            nodes=len(request.nodes),
            gpus_per_node=request.gpus_per_node,
            rendezvous=f"{m.worker_dns(name, 0, self.plan.namespace)}:{m.RDZV_PORT}",
            run_id=request.run_id,
            settings=settings,
        )
        command = m.mpirun(len(request.nodes), 1, task)
        rc, log, why = self._run_mpijob(name, "training", request.nodes, command, slots=1)
        return JobRun(
            f"MPIJob {name}: {shlex.join(command)}",
            rc,
            pods_to_nodes(log),
            why,
            log_header=f"MPIJob {name} (kubeflow.org/v2beta1), launcher: {shlex.join(command)}",
        )

    # ---- drain and cleanup ------------------------------------------------------------------------

    def drain(self, nodes: Sequence[str], reason: str) -> tuple[int, str]:
        errors = []
        for node in nodes:
            try:
                item = self.api.get(f"/api/v1/nodes/{node}")
                taints = [
                    t
                    for t in (item.get("spec") or {}).get("taints") or []
                    if t.get("key") != DRAIN_TAINT["key"]
                ]
                self.api.patch(
                    f"/api/v1/nodes/{node}",
                    {
                        "metadata": {"annotations": {DRAIN_ANNOTATION: reason}},
                        "spec": {"unschedulable": True, "taints": [*taints, DRAIN_TAINT]},
                    },
                )
            except ValidationRunError as exc:
                errors.append(f"{node}: {exc.message}")
        return (1 if errors else 0), "; ".join(errors)

    def cleanup(self) -> list[str]:
        """Delete what this run made; list again until nothing is left, or return what still is."""
        return delete_and_prove(
            self.api,
            self.plan.namespace,
            self.plan.selector,
            self._created.jobs,
            self.cleanup_s,
            self.poll_s,
            self.sleep,
        )


# ---- reading pods and jobs ---------------------------------------------------------------------------


def _waits(longest: float) -> Iterator[float]:
    """Poll intervals: 0.1 s, doubling up to ``longest`` (a job that ends at once is not waited on for
    long)."""
    wait = min(0.1, longest)
    while True:
        yield wait
        wait = min(wait * 2, longest)


def _condition(job: Json, kind: str) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions if isinstance(c, dict))


def _exit_code(pod: Json | None) -> int | None:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 1))
    return None


def _pod_problem(pod: Json) -> str:
    """Why a pod is not running: its waiting reason, or its unschedulable condition, or its phase."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message') or ''}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason')}: {condition.get('message') or ''}".rstrip(": ")
    return f"phase {status.get('phase') or 'unknown'}" if pod else "the pod is gone"


def _job_problem(job: Json, launcher: Json | None) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f"MPIJob failed: {condition.get('reason')}: {condition.get('message') or ''}".rstrip(": ")
    if launcher is None:
        return "the MPIJob's launcher pod is gone"
    return f"launcher {launcher['metadata']['name']}: {_pod_problem(launcher)}"


def pods_to_nodes(log: str) -> str:
    """Replace the worker pods' host names (``<job>-worker-<i>``, what train_ddp.py reports as its host) by
    the
    nodes they ran on, as each worker said (``GPUFLEET_TRAIN_POD`` lines of ``manifests.training_task``)."""
    mapping: dict[str, str] = {}
    for match in re.finditer(r"GPUFLEET_TRAIN_POD pod=(\S+) node=(\S+)", log):
        mapping[match.group(1)] = match.group(2)
    for pod, node in mapping.items():
        log = re.sub(rf"\b{re.escape(pod)}\b", node, log)
    return log


def _run_name(run_id: str) -> str:
    """A run id as a Kubernetes label value and name prefix: lower case, at most 40 characters (pod names
    add ``-<part><n>-worker-<i>``)."""
    name = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    return name[:40].rstrip("-")
