"""Checks for a Kubernetes cluster handed over (``provider: kubernetes``): it is reachable and ready.

Unlike the other checks, ``kubernetes_ready`` reads the cluster, as ``baremetal_inventory`` reads the user's
inventory: the cluster exists already, and what it lacks is what the user must add before anything runs.
It only reads (``gpufleet.kube.survey``): the namespace, the MPI Operator's CRD, the GPU Operator's
ClusterPolicy, the nodes with their GPUs and fabric devices against the catalog and the spec's count. The
``kubernetes`` client is imported only here, for a spec that names such a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from gpufleet.catalog import Catalog
from gpufleet.errors import ValidationRunError
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec, KubernetesProvider


def _provider(spec: ClusterSpec) -> KubernetesProvider:
    assert isinstance(spec.provider, KubernetesProvider)
    return spec.provider


def _kubeconfig_problem(spec: ClusterSpec) -> str | None:
    """Why the kubeconfig cannot be used, from the file alone (no call, no client import)."""
    from gpufleet.kube.api import kubeconfig_path

    provider = _provider(spec)
    path = kubeconfig_path(provider.kubeconfig)
    if not path.is_file():
        return (
            f"the kubeconfig {path} does not exist: set provider.kubeconfig (relative to the spec file) or "
            "$KUBECONFIG; docs/kubernetes.md says how each cloud writes one"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return f"the kubeconfig {path} cannot be read: {exc}"
    names = [str(c.get("name")) for c in data.get("contexts") or [] if isinstance(c, dict)]
    wanted = provider.context or data.get("current-context")
    if not wanted:
        return (
            f"the kubeconfig {path} has no current-context: set provider.context to one of {names or 'none'}"
        )
    if wanted not in names:
        return f"the kubeconfig {path} has no context '{wanted}'; its contexts: {', '.join(names) or 'none'}"
    return None


@check("kubernetes_kubeconfig", providers=("kubernetes",))
def kubernetes_kubeconfig(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    problem = _kubeconfig_problem(spec)
    if problem:
        yield Finding(Severity.ERROR, "kubernetes_kubeconfig", "provider.kubeconfig", problem)


@check("kubernetes_ready", providers=("kubernetes",))
def kubernetes_ready(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """The cluster answers and has what validation needs; each missing piece with how to add it."""
    if _kubeconfig_problem(spec):
        return  # kubernetes_kubeconfig said why
    from gpufleet.kube.api import api_for
    from gpufleet.kube.survey import survey

    try:
        found = survey(api_for(spec), spec, catalog)
    except ValidationRunError as exc:
        message = exc.message + (f"; {exc.hint}" if exc.hint else "")
        yield Finding(Severity.ERROR, "kubernetes_ready", "provider.context", message)
        return
    for problem in found.problems:
        level = Severity.ERROR if problem.blocking else Severity.WARNING
        yield Finding(level, "kubernetes_ready", problem.what, problem.message)
    if not found.blocking:
        gpus = sum(node.count("nvidia.com/gpu") for node in found.nodes)
        devices = ", ".join(f"{name}: {count}" for name, count in found.devices.items()) or "none"
        yield Finding(
            Severity.INFO,
            "kubernetes_ready",
            "node_groups",
            f"{len(found.nodes)} node(s) with {gpus} GPU(s); GPU Operator {found.gpu_operator}; each worker "
            f"asks for the node's GPUs and {devices}",
        )
