"""The MPIJob execution model, run for real on the local podman nodes: a ``Scheduler`` for the suite that does
with each rendered MPIJob what the MPI Operator and the kubelet would do, with the nodes standing in for pods.

For each collective run, ``validate.kubernetes.scheduler.collective_command`` and ``manifests.mpijob`` render
the MPIJob exactly as ``KubernetesScheduler`` sends it; then, from the manifest alone:

- every worker node gets the ConfigMap's files at the worker container's mount path (``/gpufleet``: the
  NCCL environment rendered from the fabric role, ``gpufleet.configure.nccl_env``), an empty ``/gpufleet-run``
  (the emptyDir), and runs the worker container's command up to its ``exec /usr/sbin/sshd -De`` with
  ``GPUFLEET_NODE_NAME`` set to the node (the downward API's ``spec.nodeName``); the node's own sshd is the
  worker's;
- the launcher (the controller node) gets what the operator gives the launcher pod
  (kubeflow/mpi-operator@caa3c47 pkg/controller/mpi_job_controller.go): a hostfile of ``<worker> slots=<n>``
  lines (``newConfigMap``; the node names stand in for the workers' ``<job>-worker-<i>.<job>.<ns>.svc``
  names), the Open MPI environment (``ompiEnvVars``, ``OMPI_MCA_orte_set_default_slots``, ``K_MPI_JOB_ROLE``)
  with ``OMPI_MCA_orte_default_hostfile`` pointing at it, and a per-job SSH key pair as the SSH Secret
  (``id_rsa``, its public half on the workers, here as ``authorized_keys2`` beside the node's own keys);
  the image's ssh client settings (MPI Operator images accept the workers' host keys) are a
  ``/root/.ssh/config``;
- the launcher container's command runs unchanged on the launcher with that environment (``podman exec``),
  and its output and exit code are the run's, returned unchanged to the suite's parser, gate, transport
  check and bisection.

Each run's files are removed afterwards (``cleanup`` proves it). Only the Kubernetes control loop (apply,
wait, logs, cordon, delete: tests/validate/test_kubernetes_control_loop.py, against the fake API) is not here.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpufleet.configure.nccl_env import render
from gpufleet.inventory.model import Host, Inventory
from gpufleet.validate.kubernetes import manifests as m
from gpufleet.validate.kubernetes.scheduler import LAUNCHER, collective_command
from gpufleet.validate.scheduler import CollectiveRun, HealthRun, JobRun, TrainingRequest
from gpufleet.validate.slurm import Sweep

HOSTFILE_DIR = "/etc/mpi"  # the operator's configMountPath
RUN_FILES = (
    "/gpufleet",
    "/gpufleet-run",
    "/root/.ssh/authorized_keys2",
    "/root/.ssh/id_rsa",
    "/root/.ssh/id_rsa.pub",
    "/root/.ssh/config",
    HOSTFILE_DIR,
)


def _exec(
    node: str, *argv: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    flags = [item for key, value in (env or {}).items() for item in ("-e", f"{key}={value}")]
    return subprocess.run(
        ["podman", "exec", *(["-i"] if stdin is not None else []), *flags, node, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _write(node: str, path: str, text: str, mode: str = "0644") -> None:
    done = _exec(
        node,
        "sh",
        "-c",
        f"mkdir -p {shlex.quote(str(Path(path).parent))} && cat > {shlex.quote(path)} "
        f"&& chmod {mode} {shlex.quote(path)}",
        stdin=text,
    )
    assert done.returncode == 0, done.stderr


class MpiJobOnNodes:
    """A ``Scheduler`` whose collectives are MPIJobs carried out by hand on podman nodes (see the module
    doc)."""

    kind = "kubernetes"

    def __init__(self, cluster: str, inventory: Inventory, *, bindir: str, sweep: Sweep) -> None:
        self.cluster = cluster
        self.launcher = inventory.controller.name
        self.hosts = inventory.compute
        self.fabric = inventory.fabric
        self.container_image: str | None = "the podman nodes (the MPIJob execution model)"
        self.shared_mount: str | None = None
        self.bindir = bindir
        self.sweep = sweep
        host_vars = inventory.to_ansible()["all"]["vars"]
        self.env_file = render(self.fabric.value, host_vars, hostname=f"{cluster} pods", path=m.NCCL_ENV)
        self.plan = m.RunPlan(
            cluster=cluster,
            run_id=f"{cluster}-model",
            namespace="default",
            image="podman-node:local",
            gpus_per_node=0,
        )
        self.jobs: list[dict] = []
        self._count = 0

    def nodes(self) -> list[Host]:
        return list(self.hosts)

    def run_health(
        self, nodes: Sequence[str], mount_point: str | None = None, *, smoke_nccl_tests: bool = False
    ) -> HealthRun:
        raise AssertionError(
            "the model runs with validation.health_checks off (the pods' health: the fake API)"
        )

    def run_collective(
        self,
        nodes: Sequence[str],
        collective: str,
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> CollectiveRun:
        sweep = self.sweep.narrowed(min_bytes, max_bytes)
        self._count += 1
        name = f"{self.plan.run_id}-coll{self._count}"
        command = collective_command(nodes, collective, sweep, 0, self.bindir)
        job = m.mpijob(self.plan, name, "collective", nodes, command, slots=1)
        self.jobs.append(job)
        started = time.monotonic()
        rc, log = self._carry_out(job, {"nccl.env": self.env_file.text})
        return CollectiveRun(
            collective, tuple(nodes), shlex.join(command), rc, log, "", time.monotonic() - started, LAUNCHER
        )

    def run_many(
        self,
        jobs: Iterable[tuple[Sequence[str], str]],
        *,
        min_bytes: int | None = None,
        max_bytes: int | None = None,
    ) -> list[CollectiveRun]:
        # One launcher node and one /etc/mpi/hostfile: the round's jobs run one after the other here (on a
        # cluster each MPIJob has its own launcher pod and they run side by side).
        return [
            self.run_collective(nodes, name, min_bytes=min_bytes, max_bytes=max_bytes) for nodes, name in jobs
        ]

    def run_training(self, request: TrainingRequest) -> JobRun:
        raise AssertionError("the model runs the collectives; the training MPIJob runs against the fake API")

    def drain(self, nodes: Sequence[str], reason: str) -> tuple[int, str]:
        return 1, "the model cordons nothing (cordoning is the fake API's test)"

    # ---- what the operator and the kubelet do ------------------------------------------------------------

    def _carry_out(self, job: dict, files: dict[str, str]) -> tuple[int, str]:
        spec = job["spec"]
        worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        container = worker["containers"][0]
        nodes = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchExpressions"][0]["values"]
        mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in worker["volumes"]}
        shell, flag, script = container["command"]
        prepare, sshd = script.rsplit(" && ", 1)
        assert (shell, flag, sshd) == ("/bin/sh", "-c", m.WORKER_SSHD), container["command"]
        env = {item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in container["env"]}
        assert env == {"GPUFLEET_NODE_NAME": "spec.nodeName"}, env
        with tempfile.TemporaryDirectory() as keys:
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", f"{keys}/id_rsa"], check=True
            )
            private, public = Path(keys, "id_rsa").read_text(), Path(keys, "id_rsa.pub").read_text()
        for node in nodes:
            for name, path in mounts.items():
                volume = volumes[name]
                if "configMap" in volume:
                    for key, text in files.items():
                        _write(node, f"{path}/{key}", text, "0555")
                elif "emptyDir" in volume and path != "/dev/shm":
                    assert _exec(node, "mkdir", "-p", path).returncode == 0
            _write(node, "/root/.ssh/authorized_keys2", public, "0600")
            started = _exec(node, shell, flag, prepare, env={"GPUFLEET_NODE_NAME": node})
            assert started.returncode == 0, started.stderr
        slots = spec["slotsPerWorker"]
        hostfile = "".join(f"{node} slots={slots}\n" for node in nodes)
        _write(self.launcher, f"{HOSTFILE_DIR}/hostfile", hostfile)
        _write(self.launcher, "/root/.ssh/id_rsa", private, "0600")
        _write(
            self.launcher,
            "/root/.ssh/config",
            "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n",
            "0600",
        )
        for key, text in files.items():
            _write(self.launcher, f"{m.FILES_DIR}/{key}", text, "0555")
        operator_env = {
            "K_MPI_JOB_ROLE": "launcher",
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": f"{HOSTFILE_DIR}/hostfile",
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": str(slots),
        }
        done = _exec(self.launcher, *launcher["command"], env=operator_env, timeout=900)
        # A pod's log is its stdout and stderr together, as kubectl logs shows it.
        return done.returncode, done.stdout + done.stderr

    def cleanup(self) -> list[str]:
        """Remove every file a run put on the nodes; return what is still there."""
        left = []
        for node in [self.launcher, *(host.name for host in self.hosts)]:
            _exec(node, "rm", "-rf", *RUN_FILES)
            still = _exec(
                node, "sh", "-c", "for p in " + " ".join(RUN_FILES) + '; do [ -e "$p" ] && echo "$p"; done'
            )
            left += [f"{node}:{path}" for path in still.stdout.split()]
        return left
