"""What a Kubernetes cluster handed over to gpufleet offers, checked before anything is created on it.

``survey(api, spec, catalog)`` reads (never writes):

- the namespace of ``scheduler.kubernetes.namespace``;
- the MPI Operator's CRD ``mpijobs.kubeflow.org`` serving ``v2beta1``;
- NVIDIA's GPU Operator: its ``ClusterPolicy`` (``nvidia.com/v1``) and ``status.state`` (``ready``,
  ``notReady`` or ``ignored``; NVIDIA/gpu-operator@0266f00 api/nvidia/v1/clusterpolicy_types.go, ``State``,
  read 2026-11-27), and whether it runs DCGM's host engine as its own pod (``spec.dcgm.enabled``, on unless
  set false, same file, ``DCGMSpec.IsEnabled``). A cluster without the operator whose nodes still advertise
  ``nvidia.com/gpu`` (GKE's own driver installer and device plugin) is accepted;
- the nodes ``scheduler.kubernetes.node_selector`` picks (default: ``node.kubernetes.io/instance-type`` of the
  compute group), each with its allocatable ``nvidia.com/gpu`` and fabric devices
  (``vpc.amazonaws.com/efa`` from the EFA device plugin, ``rdma/*`` from an RDMA device plugin), compared with
  the catalog's GPUs and fabric interfaces of the instance type and with the spec's node count.

Each missing piece is a ``Problem`` that names it and says how to add it. ``Survey.devices`` is what each
worker asks for: the GPUs, and the fabric resource the nodes advertise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog import Catalog
from gpufleet.inventory.model import Host
from gpufleet.kube.api import KubeApi, KubeApiError
from gpufleet.spec.model import ClusterSpec, FabricKind, KubernetesOptions, Role

GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
RDMA_PREFIX = "rdma/"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MPIJOB_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"

# How to add each piece (docs/kubernetes.md says the same, per cloud). The MPI Operator's install line is its
# README's (kubeflow/mpi-operator@caa3c47 README.md:21, v0.8.2, read 2026-11-27); the GPU Operator's is
# NVIDIA's Helm chart (docs.nvidia.com/datacenter/cloud-native/gpu-operator, "Installing the NVIDIA GPU
# Operator"); the EFA device plugin's is AWS's Helm chart (aws/eks-charts, aws-efa-k8s-device-plugin); RDMA's
# is NVIDIA's Network Operator with its RDMA shared device plugin.
READY_HINT = "add what each line names, then run gpufleet check SPEC (docs/kubernetes.md)"
FIX_MPI_OPERATOR = (
    "install the MPI Operator: kubectl apply --server-side -f "
    "https://raw.githubusercontent.com/kubeflow/mpi-operator/v0.8.2/deploy/v2beta1/mpi-operator.yaml"
)
FIX_GPU_OPERATOR = (
    "install NVIDIA's GPU Operator: helm install --wait gpu-operator -n gpu-operator --create-namespace "
    "nvidia/gpu-operator (add --set driver.enabled=false where the nodes' image has the driver: EKS's NVIDIA "
    "AMIs, AKS, gpufleet's baked images)"
)
FIX_EFA_PLUGIN = (
    "install the EFA device plugin: helm repo add eks https://aws.github.io/eks-charts && helm install efa "
    "eks/aws-efa-k8s-device-plugin -n kube-system (and launch the node group with its EFA interfaces)"
)
FIX_RDMA_PLUGIN = (
    "install an RDMA device plugin, e.g. NVIDIA's Network Operator with rdmaSharedDevicePlugin (resource "
    "rdma/rdma_shared_device_a) or k8s-rdma-shared-dev-plugin; CoreWeave's nodes advertise rdma/ib"
)


@dataclass(frozen=True)
class Problem:
    """A piece the cluster lacks: what (a spec path or the cluster's piece), the message with its fix."""

    what: str
    message: str
    blocking: bool = True  # False: said, but validation can run


@dataclass(frozen=True)
class KubeNode:
    name: str
    ready: bool
    unschedulable: bool
    reason: str  # why not ready, or the taints that keep pods off
    address: str
    instance_type: str
    allocatable: dict[str, str] = field(default_factory=dict)
    cpus: int = 1
    memory_mb: int = 1

    def count(self, resource: str) -> int:
        return _quantity(self.allocatable.get(resource, "0"))


@dataclass
class Survey:
    nodes: list[KubeNode] = field(default_factory=list)
    devices: dict[str, int] = field(default_factory=dict)  # fabric resource -> per worker
    dcgm_host: bool = False
    gpu_operator: str = "absent"  # its ClusterPolicy's state, or "absent"
    problems: list[Problem] = field(default_factory=list)

    @property
    def blocking(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.blocking]

    def refusal(self, host: str) -> str | None:
        """Why the cluster at ``host`` cannot be validated, each missing piece on a line; None when it can."""
        if not self.blocking:
            return None
        lines = "\n".join(f"  - {problem.what}: {problem.message}" for problem in self.blocking)
        return f"the Kubernetes cluster at {host} is not ready for validation; nothing was created:\n{lines}"

    def hosts(self, instance_type: str) -> list[Host]:
        """The inventory's compute hosts for the nodes (the catalog's fabric facts for ``instance_type``)."""
        return [
            Host(
                name=node.name,
                roles=[Role.COMPUTE],
                address=node.address,
                private_ip=node.address,
                instance_type=instance_type,
                gpus=node.count(GPU),
                cpus=node.cpus,
                memory_mb=node.memory_mb,
                gpu_stack="verify" if node.count(GPU) else "none",  # the image carries the GPU stack
            )
            for node in self.nodes
        ]


def _quantity(text: str) -> int:
    """A device count or CPU quantity as the API writes it ("8", "32", "500m" -> 0, "2k" -> 2000)."""
    text = str(text).strip()
    factors = {"k": 10**3, "M": 10**6, "G": 10**9}
    if text.endswith("m"):
        return int(text[:-1] or 0) // 1000
    if text and text[-1] in factors:
        return int(text[:-1]) * factors[text[-1]]
    try:
        return int(float(text))
    except ValueError:
        return 0


def _memory_mb(text: str) -> int:
    """A memory quantity ("2097152Ki", "64Gi", "1000000000") in MB (MiB, as Slurm's RealMemory)."""
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    decimal = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    text = str(text).strip()
    for suffix, factor in (*binary.items(), *decimal.items()):
        if text.endswith(suffix):
            return max(1, int(float(text[: -len(suffix)]) * factor) // 2**20)
    try:
        return max(1, int(float(text)) // 2**20)
    except ValueError:
        return 1


def node_selector(spec: ClusterSpec, options: KubernetesOptions) -> dict[str, str]:
    """The labels that pick the nodes: the spec's, else the compute group's instance type."""
    if options.node_selector:
        return dict(options.node_selector)
    return {INSTANCE_TYPE_LABEL: spec.compute_groups[0].instance_type}


def parse_node(item: dict[str, Any]) -> KubeNode:
    """A node as ``GET /api/v1/nodes`` lists it (core/v1 Node)."""
    metadata, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    reason = "" if ready else str((conditions.get("Ready") or {}).get("message") or "no Ready condition")
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    foreign = [t for t in taints if t.get("key") != GPU]
    if foreign and not reason:
        reason = "tainted " + ", ".join(
            f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in foreign
        )
    addresses = {
        a.get("type"): a.get("address") for a in status.get("addresses") or [] if isinstance(a, dict)
    }
    labels = metadata.get("labels") or {}
    allocatable = {str(k): str(v) for k, v in (status.get("allocatable") or {}).items()}
    return KubeNode(
        name=str(metadata.get("name")),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        reason=reason,
        address=str(addresses.get("InternalIP") or addresses.get("Hostname") or metadata.get("name")),
        instance_type=str(labels.get(INSTANCE_TYPE_LABEL) or ""),
        allocatable=allocatable,
        cpus=max(1, _quantity(allocatable.get("cpu", "1"))),
        memory_mb=_memory_mb(allocatable.get("memory", "1Mi")),
    )


def survey(api: KubeApi, spec: ClusterSpec, catalog: Catalog) -> Survey:
    """Everything the module doc lists; the API must answer (else ``KubeUnreachable``)."""
    options = spec.scheduler.kubernetes
    assert options is not None, "survey() needs scheduler.kubernetes"
    found = Survey()
    api.get("/version")
    _namespace(api, options, found)
    _mpi_operator(api, found)
    selector = node_selector(spec, options)
    label_selector = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
    found.nodes = sorted(
        (parse_node(item) for item in api.list("/api/v1/nodes", label_selector)), key=lambda n: n.name
    )
    _gpu_operator(api, found)
    _capacity(spec, catalog, label_selector, found)
    return found


def _namespace(api: KubeApi, options: KubernetesOptions, found: Survey) -> None:
    if api.get_or_none(f"/api/v1/namespaces/{options.namespace}") is None:
        found.problems.append(
            Problem(
                "scheduler.kubernetes.namespace",
                f"namespace '{options.namespace}' does not exist: kubectl create namespace "
                f"{options.namespace}, "
                "or name an existing one",
            )
        )


def _mpi_operator(api: KubeApi, found: Survey) -> None:
    crd = api.get_or_none(MPIJOB_CRD)
    versions = [
        str(v.get("name"))
        for v in ((crd or {}).get("spec") or {}).get("versions") or []
        if isinstance(v, dict) and v.get("served")
    ]
    if crd is None:
        found.problems.append(Problem("MPI Operator", f"the MPIJob CRD is not installed: {FIX_MPI_OPERATOR}"))
    elif "v2beta1" not in versions:
        found.problems.append(
            Problem(
                "MPI Operator",
                f"mpijobs.kubeflow.org serves {', '.join(versions) or 'no version'}, not v2beta1 (the "
                "Training "
                "Operator v1's MPIJob CRD takes its name): remove it (kubectl delete crd "
                "mpijobs.kubeflow.org) "
                f"and {FIX_MPI_OPERATOR}",
            )
        )


def _gpu_operator(api: KubeApi, found: Survey) -> None:
    try:
        policies = api.list(CLUSTER_POLICIES)
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        policies = []
    if not policies:
        if not any(node.count(GPU) for node in found.nodes):
            found.problems.append(
                Problem("GPU Operator", f"no ClusterPolicy and no node advertises {GPU}: {FIX_GPU_OPERATOR}")
            )
        return
    active = [p for p in policies if (p.get("status") or {}).get("state") != "ignored"] or policies[:1]
    policy = active[0]
    state = str((policy.get("status") or {}).get("state") or "unknown")
    found.gpu_operator = state
    dcgm = ((policy.get("spec") or {}).get("dcgm") or {}).get("enabled")
    found.dcgm_host = dcgm is not False
    if state != "ready":
        name = (policy.get("metadata") or {}).get("name")
        found.problems.append(
            Problem(
                "GPU Operator",
                f"the GPU Operator's ClusterPolicy {name} is {state}, not ready: kubectl describe "
                "clusterpolicy "
                f"{name} and the pods of its namespace say which component is failing (the driver, toolkit "
                "or "
                "device plugin DaemonSet)",
            )
        )


def _capacity(spec: ClusterSpec, catalog: Catalog, selector: str, found: Survey) -> None:
    group = spec.compute_groups[0]
    item = catalog.get(group.instance_type)
    gpus = item.gpu_count if item is not None else None
    want_nodes = spec.compute_count
    nodes = found.nodes
    if len(nodes) < want_nodes or not nodes:
        have = sum(node.count(GPU) for node in nodes)
        per = f" x {gpus} GPUs = {want_nodes * gpus} GPUs" if gpus else ""
        found.problems.append(
            Problem(
                "node_groups",
                f"the spec asks for {want_nodes} node(s){per}; the cluster has {len(nodes)} node(s) labelled "
                f"{selector} with {have} GPU(s) allocatable: add nodes to the node group, or lower count",
            )
        )
    if gpus:
        short = [f"{node.name} ({node.count(GPU)})" for node in nodes if node.count(GPU) < gpus]
        fix = (
            FIX_GPU_OPERATOR
            if found.gpu_operator == "absent"
            else "the GPU Operator's device plugin pods on those nodes say why (kubectl -n gpu-operator "
            "get pods -o wide)"
        )
        if short:
            found.problems.append(
                Problem(
                    "nodes",
                    f"{len(short)} node(s) advertise fewer than the {gpus} {GPU} a {group.instance_type} "
                    "has: "
                    f"{', '.join(short[:8])}; {fix}",
                )
            )
    _fabric_devices(spec, item.fabric.interfaces if item is not None else 0, found)


def _fabric_devices(spec: ClusterSpec, interfaces: int, found: Survey) -> None:
    fabric = spec.fabric.kind
    nodes = found.nodes
    if not nodes or fabric is FabricKind.ETHERNET:
        return
    if fabric is FabricKind.EFA:
        want = spec.fabric.interfaces if spec.fabric.interfaces is not None else interfaces
        lacking = [f"{node.name} ({node.count(EFA)})" for node in nodes if node.count(EFA) < max(want, 1)]
        if lacking:
            found.problems.append(
                Problem(
                    "fabric",
                    f"{len(lacking)} node(s) advertise fewer than {want} {EFA}: {', '.join(lacking[:8])}; "
                    f"{FIX_EFA_PLUGIN}",
                )
            )
        found.devices = {EFA: want}
        return
    names = sorted({name for node in nodes for name in node.allocatable if name.startswith(RDMA_PREFIX)})
    usable = [name for name in names if all(node.count(name) > 0 for node in nodes)]
    if not usable:
        found.problems.append(
            Problem("fabric", f"no node advertises an rdma/* resource for {fabric.value}: {FIX_RDMA_PLUGIN}")
        )
        return
    # One device of the shared device plugin gives the pod every HCA of the node (rdma/ib on CoreWeave).
    chosen = "rdma/ib" if "rdma/ib" in usable else usable[0]
    found.devices = {chosen: 1}
