"""A fake Kubernetes API server for the tests: a real HTTP server that answers only the calls gpufleet's
Kubernetes adapter makes, in the API's own shapes (kubernetes.io "API Concepts" and the core/v1, batch/v1 and
apiextensions/v1 references; the MPI Operator's v2beta1 types, kubeflow/mpi-operator@caa3c47; read
2026-11-27):

- objects carry ``apiVersion``, ``kind``, ``metadata`` (``uid``, ``resourceVersion``, ``creationTimestamp``)
  and ``status``; lists are ``<Kind>List`` with ``items``; errors are a ``Status`` object with ``reason`` and
  ``code`` (404 NotFound, 409 AlreadyExists, 422 Invalid, 415 UnsupportedMediaType);
- ``labelSelector`` understands equality (``a=b,c=d``) and set (``app in (x,y)``) requirements;
- a PATCH must be ``application/merge-patch+json`` (RFC 7386: maps merge, lists are replaced);
- a DELETE with ``propagationPolicy: Background`` removes the object at once and its dependents later, as the
  garbage collector does (``gc_lists``: after that many more list calls); a pod in ``stuck`` never goes
  (a finalizer that does not finish);
- every created Pod and ConfigMap is checked with kubernetes-validate (strict, the API's schemas) and every
  MPIJob against the operator's constraints (``kube_schemas``): an invalid object is a 422, as the API
  server's own validation would answer.

It also plays the controllers a real cluster runs: the kubelet (a health pod "runs" and prints what
``node_health.py`` prints on a node with ``gpus`` GPUs) and the MPI Operator (an MPIJob gets its worker pods,
scheduled only onto nodes with the resources they ask for, else Pending with the scheduler's message; a
launcher Job and pod, a Service, an SSH Secret and a hostfile ConfigMap labelled ``app=<job>``; the launcher
"runs" its mpirun command: the nccl-tests output comes from ``validate_fakes.FakeSlurm``'s generator, in the
environment of the run's ConfigMap ``nccl.env``, so slow nodes, corrupting nodes and a socket fallback show
as they would; a torchrun launcher prints a captured two-rank training run, with the pod host names a real
run prints).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import kube_schemas
from validate_fakes import FakeSlurm

Json = dict[str, Any]
TRAINING_LOG = Path(__file__).parent / "data" / "training" / "local-cluster-2nodes.log"


def make_node(
    name: str,
    instance_type: str = "p5.48xlarge",
    *,
    gpus: int = 8,
    efa: int = 0,
    rdma: dict[str, int] | None = None,
    ready: bool = True,
    taints: list[Json] | None = None,
    address: str | None = None,
) -> Json:
    """A core/v1 Node as GET /api/v1/nodes returns it."""
    allocatable = {"cpu": "191450m", "memory": "2097152Ki", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if efa:
        allocatable["vpc.amazonaws.com/efa"] = str(efa)
    allocatable.update({key: str(value) for key, value in (rdma or {}).items()})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": instance_type,
            },
            "annotations": {},
        },
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "addresses": [
                {"type": "InternalIP", "address": address or f"10.0.{len(name)}.{abs(hash(name)) % 250}"}
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else "container runtime is down",
                }
            ],
        },
    }


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for requirement in filter(None, re.split(r",(?![^(]*\))", selector)):
        found = re.match(r"^\s*(\S+)\s+in\s+\(([^)]*)\)\s*$", requirement)
        if found:
            if labels.get(found.group(1)) not in [v.strip() for v in found.group(2).split(",")]:
                return False
            continue
        key, _, value = requirement.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def _merge(target: Json, patch: Json) -> Json:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class FakeKube:
    """The cluster's state and its controllers; ``serve()`` puts an HTTP API in front of it."""

    def __init__(
        self,
        nodes: list[Json],
        *,
        fabric: str = "efa",
        namespace: str = "default",
        mpi_operator: str | None = "v2beta1",  # the served version of mpijobs.kubeflow.org; None: no CRD
        gpu_operator: str | None = "ready",  # the ClusterPolicy's state; None: no GPU Operator
        bad: dict[str, str] | None = None,  # node -> "slow" | "wrong" | "socket" | "crash"
        health: dict[str, dict] | None = None,
        busbw_scale: float = 1.0,
        stuck: set[str] | None = None,  # pod name prefixes that never go away
        gc_lists: int = 1,
    ) -> None:
        self.nodes = {node["metadata"]["name"]: node for node in nodes}
        self.fabric = fabric
        self.namespaces = {namespace}
        self.mpi_operator = mpi_operator
        self.gpu_operator = gpu_operator
        gpus = max((int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes), default=0)
        self.slurm = FakeSlurm(
            list(self.nodes), gpus=gpus, fabric=fabric, bad=bad, health=health, busbw_scale=busbw_scale
        )
        self.stuck = stuck or set()
        self.gc_lists = gc_lists
        self.objects: dict[str, dict[str, Json]] = {
            kind: {} for kind in ("pods", "configmaps", "mpijobs", "jobs", "services", "secrets")
        }
        self.logs: dict[str, str] = {}
        self.pending_gc: list[tuple[int, str, str]] = []  # (lists left, kind, name)
        self.requests: list[tuple[str, str]] = []
        self.mpijobs_made: list[Json] = []
        self.created: list[Json] = []  # every object gpufleet created, as it sent it
        self.lock = threading.RLock()

    # ---- serving ------------------------------------------------------------------------------------

    @contextmanager
    def serve(self, tmp_path: Path, *, context: str = "fake") -> Iterator[Path]:
        """The server on a free local port; yields a kubeconfig file whose context reaches it."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, method: str) -> None:
                parsed = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                try:
                    if self.headers.get("Authorization") != "Bearer fake-token":
                        raise ApiError(401, "Unauthorized", "Unauthorized")
                    code, answer = fake.handle(
                        method, parsed.path, parse_qs(parsed.query), body, self.headers.get("Content-Type")
                    )
                except ApiError as exc:
                    code, answer = exc.code, fake.status(exc)
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(code)
                self.send_header(
                    "Content-Type", "text/plain" if isinstance(answer, str) else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def do_DELETE(self) -> None:
                self._answer("DELETE")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        config = tmp_path / "kubeconfig"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                    ],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": context,
                }
            )
        )
        try:
            yield config
        finally:
            server.shutdown()
            server.server_close()

    @staticmethod
    def status(exc: ApiError) -> Json:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": exc.message,
            "reason": exc.reason,
            "code": exc.code,
        }

    # ---- routing ------------------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, ctype: str | None
    ) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path))
            selector = (query.get("labelSelector") or [""])[0]
            if path == "/version":
                return 200, {"major": "1", "minor": "33", "gitVersion": "v1.33.4"}
            if path == "/api/v1/nodes" and method == "GET":
                return 200, self._list("NodeList", list(self.nodes.values()), selector)
            found = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
            if found:
                return self._node(method, found.group(1), body, ctype)
            found = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
            if found and method == "GET":
                if found.group(1) not in self.namespaces:
                    raise ApiError(404, "NotFound", f'namespaces "{found.group(1)}" not found')
                return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": found.group(1)}}
            if path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org":
                return self._crd()
            if path == "/apis/nvidia.com/v1/clusterpolicies":
                return self._clusterpolicies()
            found = re.fullmatch(
                r"/(?:api/v1|apis/batch/v1|apis/kubeflow\.org/v2beta1)/namespaces/([^/]+)/"
                r"(pods|configmaps|mpijobs|jobs|services|secrets)(?:/([^/]+))?(/log)?",
                path,
            )
            if found is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            namespace, kind, name, log = found.groups()
            if namespace not in self.namespaces:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
            if log:
                if name not in self.logs:
                    raise ApiError(404, "NotFound", f'pods "{name}" not found')
                return 200, self.logs[name]
            if name is None and method == "GET":
                self._collect_garbage()
                return 200, self._list(
                    f"{kind[:-1].capitalize()}List", list(self.objects[kind].values()), selector
                )
            if name is None and method == "POST":
                return 201, self._create(kind, namespace, body)
            if name is not None and method == "GET":
                if name not in self.objects[kind]:
                    raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
                return 200, self.objects[kind][name]
            if name is not None and method == "DELETE":
                return 200, self._delete(kind, name, body)
            raise ApiError(405, "MethodNotAllowed", f"{method} {path}")

    def _list(self, kind: str, items: list[Json], selector: str) -> Json:
        chosen = [item for item in items if _selector_matches(selector, item["metadata"].get("labels") or {})]
        api = "kubeflow.org/v2beta1" if kind == "MpijobList" else "v1"
        return {"apiVersion": api, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": chosen}

    def _crd(self) -> tuple[int, Json]:
        if self.mpi_operator is None:
            raise ApiError(
                404,
                "NotFound",
                'customresourcedefinitions.apiextensions.k8s.io "mpijobs.kubeflow.org" not found',
            )
        return 200, {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "mpijobs.kubeflow.org"},
            "spec": {
                "group": "kubeflow.org",
                "versions": [{"name": self.mpi_operator, "served": True, "storage": True}],
            },
        }

    def _clusterpolicies(self) -> tuple[int, Json]:
        if self.gpu_operator is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        policy = {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"dcgm": {"enabled": False}},
            "status": {"state": self.gpu_operator, "namespace": "gpu-operator"},
        }
        return 200, {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicyList", "items": [policy]}

    def _node(self, method: str, name: str, body: Any, ctype: str | None) -> tuple[int, Json]:
        if name not in self.nodes:
            raise ApiError(404, "NotFound", f'nodes "{name}" not found')
        if method == "GET":
            return 200, self.nodes[name]
        if method == "PATCH":
            if ctype != "application/merge-patch+json":
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml, "
                    f"application/strategic-merge-patch+json ({ctype})",
                )
            return 200, _merge(self.nodes[name], body)
        raise ApiError(405, "MethodNotAllowed", method)

    # ---- objects ------------------------------------------------------------------------------------

    def _stamp(self, obj: Json) -> Json:
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("resourceVersion", "1")
        metadata.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return obj

    def _create(self, kind: str, namespace: str, body: Json) -> Json:
        name = body.get("metadata", {}).get("name")
        if body.get("metadata", {}).get("namespace", namespace) != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        errors = kube_schemas.problems(body)
        if errors:
            raise ApiError(422, "Invalid", f'{body.get("kind")} "{name}" is invalid: {"; ".join(errors)}')
        if name in self.objects[kind]:
            raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists')
        obj = self._stamp(body)
        self.objects[kind][name] = obj
        self.created.append(copy.deepcopy(body))
        if kind == "pods":
            self._run_pod(obj)
        elif kind == "mpijobs":
            self.mpijobs_made.append(copy.deepcopy(body))
            self._operate(obj)
        return obj

    def _delete(self, kind: str, name: str, body: Any) -> Json:
        if name not in self.objects[kind]:
            raise ApiError(404, "NotFound", f'{kind} "{name}" not found')
        if kind == "pods" and any(name.startswith(prefix) for prefix in self.stuck):
            self.objects[kind][name]["metadata"]["deletionTimestamp"] = "2026-11-27T00:00:00Z"
            return self.objects[kind][name]  # a finalizer keeps it
        obj = self.objects[kind].pop(name)
        if kind == "mpijobs":
            policy = (body or {}).get("propagationPolicy", "Background")
            assert policy == "Background", f"delete with {policy}"
            for owned_kind, owned in self._owned(name):
                self.pending_gc.append((self.gc_lists, owned_kind, owned))
        return obj

    def _owned(self, job: str) -> list[tuple[str, str]]:
        owned = []
        for kind in ("pods", "jobs", "services", "secrets", "configmaps"):
            for name, obj in self.objects[kind].items():
                labels = obj["metadata"].get("labels") or {}
                if labels.get("app") == job or labels.get("training.kubeflow.org/job-name") == job:
                    owned.append((kind, name))
        return owned

    def _collect_garbage(self) -> None:
        still = []
        for lists, kind, name in self.pending_gc:
            if lists <= 0 and not any(name.startswith(prefix) for prefix in self.stuck):
                self.objects[kind].pop(name, None)
                continue
            still.append((lists - 1, kind, name))
        self.pending_gc = still

    # ---- the kubelet: health pods ---------------------------------------------------------------------

    def _run_pod(self, pod: Json) -> None:
        node = pod["spec"].get("nodeName")
        container = pod["spec"]["containers"][0]
        command = container["command"]
        assert command[:2] == ["python3", "/gpufleet/node_health.py"], command
        assert node in self.nodes, f"health pod pinned to an unknown node {node}"
        task = ["python3", "-c", "GPUFLEET_HEALTH", *command[2:]]
        _rc, out, _err = self.slurm._health([node], task)
        self.logs[pod["metadata"]["name"]] = out.split(": ", 1)[1] if ": " in out else out
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": container["name"], "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ],
        }

    # ---- the MPI Operator -----------------------------------------------------------------------------

    def _fits(self, node: str, resources: Json) -> str | None:
        allocatable = self.nodes[node]["status"]["allocatable"]
        for name, value in (resources.get("limits") or {}).items():
            if int(allocatable.get(name, "0")) < int(value):
                return name
        return None

    def _operate(self, job: Json) -> None:
        name = job["metadata"]["name"]
        spec = job["spec"]
        worker_template = spec["mpiReplicaSpecs"]["Worker"]["template"]
        launcher_template = spec["mpiReplicaSpecs"]["Launcher"]["template"]
        replicas = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
        terms = worker_template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        wanted = terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        container = worker_template["spec"]["containers"][0]
        labels = {"app": name}
        self._put(
            "services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels}}
        )
        self._put(
            "secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-ssh", "labels": labels}},
        )
        hostfile = "".join(
            f"{name}-worker-{i}.{name}.{job['metadata']['namespace']}.svc slots={spec['slotsPerWorker']}\n"
            for i in range(replicas)
        )
        self._put(
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-config", "labels": labels},
                "data": {"hostfile": hostfile},
            },
        )
        placed: list[str] = []
        pending = None
        for index in range(replicas):
            pod_labels = {
                **(worker_template["metadata"].get("labels") or {}),
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/job-role": "worker",
                "training.kubeflow.org/replica-index": str(index),
            }
            free = [
                node
                for node in wanted
                if node not in placed and self._fits(node, container.get("resources") or {}) is None
            ]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-worker-{index}", "labels": pod_labels},
                "spec": copy.deepcopy(worker_template["spec"]),
            }
            if free:
                placed.append(free[0])
                pod["spec"]["nodeName"] = free[0]
                pod["status"] = {"phase": "Running"}
            else:
                short = {self._fits(node, container.get("resources") or {}) for node in wanted} - {None}
                message = f"0/{len(self.nodes)} nodes are available: " + ", ".join(
                    f"Insufficient {s}" for s in sorted(short)
                )
                pod["status"] = {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": message,
                        }
                    ],
                }
                pending = message
            self._put("pods", pod)
        job["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
        if pending:
            return  # the launcher waits for the workers (launcherCreationPolicy WaitForWorkersReady)
        launcher_name = f"{name}-launcher-x7k2p"
        self._put(
            "jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{name}-launcher", "labels": labels},
            },
        )
        command = launcher_template["spec"]["containers"][0]["command"]
        rc, log = self._launch(name, command, placed)
        launcher_labels = {
            **(launcher_template["metadata"].get("labels") or {}),
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": "launcher",
        }
        self._put(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": launcher_name, "labels": launcher_labels},
                "spec": copy.deepcopy(launcher_template["spec"]),
                "status": {
                    "phase": "Succeeded" if rc == 0 else "Failed",
                    "containerStatuses": [
                        {
                            "name": "launcher",
                            "state": {
                                "terminated": {"exitCode": rc, "reason": "Completed" if rc == 0 else "Error"}
                            },
                        }
                    ],
                },
            },
        )
        self.logs[launcher_name] = log
        done = "Succeeded" if rc == 0 else "Failed"
        job["status"]["conditions"].append(
            {
                "type": done,
                "status": "True",
                "reason": f"MPIJob{done}",
                "message": f"MPIJob {name} {done.lower()}",
            }
        )

    def _put(self, kind: str, obj: Json) -> None:
        obj = self._stamp(obj)
        self.objects[kind][obj["metadata"]["name"]] = obj

    def _env_file(self) -> dict[str, str]:
        """The exports of the run's nccl.env (the ConfigMap every pod mounts at /gpufleet)."""
        files = [cm for cm in self.objects["configmaps"].values() if "nccl.env" in (cm.get("data") or {})]
        assert files, "an MPIJob ran before its ConfigMap of files was made"
        return dict(re.findall(r"^export (\w+)=(\S*)$", files[-1]["data"]["nccl.env"], re.MULTILINE))

    def _launch(self, job: str, command: list[str], nodes: list[str]) -> tuple[int, str]:
        """What the launcher's mpirun prints, run over the workers on ``nodes``."""
        assert command[:2] == ["mpirun", "--allow-run-as-root"], command
        ranks = int(command[command.index("-np") + 1])
        per_node = int(command[command.index("--map-by") + 1].split(":")[1])
        assert ranks == per_node * len(nodes), (ranks, per_node, nodes)
        task = command[command.index("none") + 1 :]
        assert task[:2] == ["bash", "-c"], task
        script = task[2]
        if "torchrun" in script:
            return self._train(job, nodes, script)
        assert ". /gpufleet/nccl.env" in script, script
        env = {**self._env_file(), **dict(re.findall(r"export (\w+)=(\S+?);", script))}
        reports = "".join(
            f"GPUFLEET_NCCL_ENV host={node} fabric={env['GPUFLEET_FABRIC']} "
            f"transport={env['GPUFLEET_TRANSPORT']} file=/gpufleet/nccl.env\n"
            for node in nodes
        )
        rc, out, err = self.slurm._collective(nodes, per_node, task[3:], env)
        return rc, reports + out + err

    def _train(self, job: str, nodes: list[str], script: str) -> tuple[int, str]:
        """A captured two-rank run (examples/jobs/train_ddp.py on the local cluster), its hosts the worker
        pods'
        names, as train_ddp.py prints socket.gethostname() in a pod."""
        assert "--nnodes=2" in script and len(nodes) == 2, "the captured run has two nodes"
        text = TRAINING_LOG.read_text()
        text = "\n".join(
            line
            for line in text.splitlines()
            if not line.startswith(("GPUFLEET_TRAIN_NODE", "GPUFLEET_TRAIN_JOB"))
        )
        for index in range(2):
            text = text.replace(f"e2e-compute-{index}", f"{job}-worker-{index}")
        lines = [f"GPUFLEET_TRAIN_NODE host={node} ifname= fabric={self.fabric}" for node in nodes]
        lines += [f"GPUFLEET_TRAIN_POD pod={job}-worker-{i} node={node}" for i, node in enumerate(nodes)]
        return 0, "\n".join(lines) + "\n" + text


def shell_words(command: list[str]) -> str:
    return shlex.join(command)
