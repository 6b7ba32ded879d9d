"""The Kubernetes objects one validation run creates, as plain manifests (dicts, the API's JSON).

- one ConfigMap, ``<run>-files``: the NCCL environment file (``gpufleet.configure.nccl_env``, rendered from
  the fabric role that writes /etc/gpufleet/nccl.env on Slurm nodes), the health script
  (``node/node_health.py``) and the training job (examples/jobs/train_ddp.py), mounted read-only at
  ``/gpufleet`` in every pod;
- a health pod per node (``health_pod``), pinned with ``nodeName``, asking for all of the node's GPUs and
  fabric devices, running ``python3 /gpufleet/node_health.py``;
- an MPIJob (``kubeflow.org/v2beta1``, the MPI Operator) per collective run and for the training check
  (``mpijob``): one worker per node, pinned by a required node affinity on ``kubernetes.io/hostname`` and a
  pod anti-affinity on the job's workers; each worker asks for the catalog's GPUs and fabric devices and runs
  only ``sshd``, after writing its node's name where processes started over SSH can read it; the launcher runs
  ``mpirun`` over SSH into the workers (the operator writes the hostfile and the SSH keys), exactly the
  command ``launcher_command`` returns.

Every object carries ``gpufleet.io/run`` (the run's id) and ``gpufleet.io/cluster`` labels; the operator
copies the pod templates' labels onto the launcher and worker pods, so one label selector finds everything a
run made (``KubernetesScheduler.cleanup``). Field names and shapes are the Kubernetes API's (core/v1 Pod,
ConfigMap) and the MPI Operator's CRD (kubeflow/mpi-operator@caa3c47
manifests/base/kubeflow.org_mpijobs.yaml); tests/validate/kubernetes checks every rendering against both.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.kube.cleanup import LABEL_CLUSTER, LABEL_RUN

Json = dict[str, Any]

LABEL_PART = "gpufleet.io/part"  # files, health, collective, training
MPIJOB_API = "kubeflow.org/v2beta1"
GPU_RESOURCE = "nvidia.com/gpu"

FILES_DIR = "/gpufleet"  # the ConfigMap's files in every pod
NCCL_ENV = f"{FILES_DIR}/nccl.env"
HEALTH_SCRIPT = f"{FILES_DIR}/node_health.py"
TRAIN_SCRIPT = f"{FILES_DIR}/train_ddp.py"
RUN_DIR = "/gpufleet-run"  # an emptyDir per worker: what its sshd-started processes read
NODE_NAME_FILE = f"{RUN_DIR}/node-name"
SHARED_DIR = "/gpufleet-shared"  # scheduler.kubernetes.shared_volume
# A worker writes the node it runs on (the downward API's spec.nodeName, which exists only as an environment
# variable) to a file: processes mpirun starts over SSH do not inherit the container's environment.
WORKER_PREPARE = f'printf "%s\\n" "$GPUFLEET_NODE_NAME" > {NODE_NAME_FILE}'
WORKER_SSHD = "exec /usr/sbin/sshd -De"  # the MPI Operator's default worker command (mpi_job_controller.go)
NODE_NAME_EXPR = f'"$(cat {NODE_NAME_FILE} 2>/dev/null || hostname -s)"'
RDZV_PORT = 29500


@dataclass(frozen=True)
class RunPlan:
    """What every object of one run shares."""

    cluster: str
    run_id: str
    namespace: str
    image: str
    gpus_per_node: int
    devices: Mapping[str, int] = field(default_factory=dict)  # fabric resource -> count per node
    shared_volume: str | None = None
    timeout_s: int = 1800

    def labels(self, part: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_CLUSTER: self.cluster, LABEL_PART: part}

    @property
    def selector(self) -> str:
        """The label selector of everything this run made."""
        return f"{LABEL_RUN}={self.run_id}"

    def resources(self) -> Json:
        """A node's GPUs and fabric devices (extended resources: limits, which requests default to)."""
        limits = {GPU_RESOURCE: str(self.gpus_per_node)} if self.gpus_per_node else {}
        limits.update({name: str(count) for name, count in self.devices.items() if count})
        return {"limits": limits} if limits else {}

    @property
    def files_name(self) -> str:
        return f"{self.run_id}-files"


# GPU nodes are often tainted so that only pods that ask for GPUs land there (EKS, GKE and AKS GPU node
# pools: nvidia.com/gpu=present:NoSchedule); the run's pods tolerate that taint and nothing else.
TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]


def files_config_map(plan: RunPlan, files: Mapping[str, str]) -> Json:
    """The run's files (name -> text), mounted at ``FILES_DIR`` in every pod."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": plan.files_name, "namespace": plan.namespace, "labels": plan.labels("files")},
        "data": dict(files),
    }


def _files_volume(plan: RunPlan) -> Json:
    return {"name": "gpufleet", "configMap": {"name": plan.files_name, "defaultMode": 0o555}}


def _files_mount() -> Json:
    return {"name": "gpufleet", "mountPath": FILES_DIR, "readOnly": True}


def _node_name_env() -> Json:
    return {"name": "GPUFLEET_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}


def health_pod(plan: RunPlan, index: int, node: str, args: Sequence[str], *, dcgm_host: bool) -> Json:
    """The health script on ``node``, with all of its GPUs and fabric devices; ``dcgm_host``: the GPU
    Operator runs DCGM's host engine on the node (its port 5555 on the node's address)."""
    env = [_node_name_env()]
    if dcgm_host:
        env.append({"name": "GPUFLEET_DCGM_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    container: Json = {
        "name": "health",
        "image": plan.image,
        "command": ["python3", HEALTH_SCRIPT, *args],
        "env": env,
        "volumeMounts": [_files_mount()],
    }
    if plan.resources():
        container["resources"] = plan.resources()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{plan.run_id}-health-{index}",
            "namespace": plan.namespace,
            "labels": plan.labels("health"),
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": TOLERATIONS,
            "activeDeadlineSeconds": plan.timeout_s,
            "containers": [container],
            "volumes": [_files_volume(plan)],
        },
    }


def mpijob(
    plan: RunPlan, name: str, part: str, nodes: Sequence[str], launcher: Sequence[str], *, slots: int
) -> Json:
    """An MPIJob whose launcher runs ``launcher`` (an mpirun command) over one worker on each of ``nodes``."""
    labels = plan.labels(part)
    worker_mounts = [
        _files_mount(),
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    worker_volumes = [
        _files_volume(plan),
        {"name": "run", "emptyDir": {}},
        # NCCL's shared-memory transport and its proxy buffers need more than a container's 64 MiB /dev/shm.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    if plan.shared_volume:
        worker_mounts.append({"name": "shared", "mountPath": SHARED_DIR})
        worker_volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": plan.shared_volume}})
    worker: Json = {
        "name": "worker",
        "image": plan.image,
        "command": ["/bin/sh", "-c", f"{WORKER_PREPARE} && {WORKER_SSHD}"],
        "env": [_node_name_env()],
        "volumeMounts": worker_mounts,
    }
    if plan.resources():
        worker["resources"] = plan.resources()
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
                        ]
                    }
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            "training.kubeflow.org/job-name": name,
                            "training.kubeflow.org/job-role": "worker",
                        }
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }
    launcher_container: Json = {
        "name": "launcher",
        "image": plan.image,
        "command": list(launcher),
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [_files_mount()],
    }
    return {
        "apiVersion": MPIJOB_API,
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": plan.namespace, "labels": labels},
        "spec": {
            "slotsPerWorker": slots,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "backoffLimit": 0,
                "activeDeadlineSeconds": plan.timeout_s,
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "tolerations": TOLERATIONS,
                            "containers": [launcher_container],
                            "volumes": [_files_volume(plan)],
                        },
                    },
                },
                "Worker": {
                    "replicas": len(nodes),
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "affinity": affinity,
                            "tolerations": TOLERATIONS,
                            "containers": [worker],
                            "volumes": worker_volumes,
                        },
                    },
                },
            },
        },
    }


def mpirun(ranks: int, per_node: int, task: Sequence[str]) -> list[str]:
    """The launcher's mpirun: ``per_node`` ranks on each worker of the operator's hostfile (its
    OMPI_MCA_orte_default_hostfile), ``task`` as each rank. Root in the image, as the operator's SSH keys are
    root's (``sshAuthMountPath: /root/.ssh``)."""
    return [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(ranks),
        "--map-by",
        f"ppr:{per_node}:node",
        "--bind-to",
        "none",
        *task,
    ]


def training_task(
    *,
    nodes: int,
    gpus_per_node: int,
    rendezvous: str,
    run_id: str,
    settings: Mapping[str, str],
) -> list[str]:
    """One rank per worker: the node's NCCL environment, then torchrun with one process per GPU, the
    rendezvous on the first worker (train.sbatch's steps, with Open MPI's rank as torchrun's node rank)."""
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in settings.items())
    script = "; ".join(
        [
            f'. {NCCL_ENV} || {{ echo "GPUFLEET_TRAIN_NODE host={NODE_NAME_EXPR} missing {NCCL_ENV}" >&2; '
            "exit 97; }",
            "export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-${NCCL_SOCKET_IFNAME:-}} "
            "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}",
            f'echo "GPUFLEET_TRAIN_NODE host={NODE_NAME_EXPR} ifname=${{NCCL_SOCKET_IFNAME:-}} '
            'fabric=${GPUFLEET_FABRIC:-}"',
            f'echo "GPUFLEET_TRAIN_POD pod=$(hostname) node={NODE_NAME_EXPR}"',
            f"export {exports}",
            f"exec torchrun --nnodes={nodes} --nproc-per-node={max(gpus_per_node, 1)} "
            "--node-rank=$OMPI_COMM_WORLD_RANK --rdzv-backend=c10d "
            f"--rdzv-endpoint={rendezvous} --rdzv-id={run_id} "
            '--rdzv-conf="join_timeout=${TRAIN_JOIN_TIMEOUT:-120}" --max-restarts=0 '
            f"{TRAIN_SCRIPT}",
        ]
    )
    return ["bash", "-c", script]


def worker_dns(job: str, index: int, namespace: str) -> str:
    """A worker's name in the job's Service, as the operator writes it into the hostfile
    (mpi_job_controller.go newConfigMap: ``%s.%s.%s.svc`` of the worker, job and namespace)."""
    return f"{job}-worker-{index}.{job}.{namespace}.svc"
