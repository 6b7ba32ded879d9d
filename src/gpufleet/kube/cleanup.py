"""Removing what gpufleet made on a Kubernetes cluster, and proving that nothing is left.

Everything a validation run creates carries its labels (``LABEL_RUN``, ``LABEL_CLUSTER``); the MPI Operator's
own objects for an MPIJob (the launcher Job, the workers' Service, the SSH Secret, the hostfile ConfigMap,
labelled ``app=<job>``; kubeflow/mpi-operator@caa3c47 pkg/controller/mpi_job_controller.go) are owned by the
MPIJob and removed with it by Kubernetes' garbage collector, in the background: ``delete_and_prove`` deletes,
then lists again until none is left or a deadline passes, and returns what is left (``gpufleet validate`` and
``down`` exit 9 on it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gpufleet.kube.api import KubeApi, KubeApiError

LABEL_RUN = "gpufleet.io/run"
LABEL_CLUSTER = "gpufleet.io/cluster"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
PODS = "/api/v1/namespaces/{ns}/pods"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
OPERATOR_KINDS = {
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
    "services": "/api/v1/namespaces/{ns}/services",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "configmaps": CONFIGMAPS,
}


def delete_and_prove(
    api: KubeApi,
    namespace: str,
    selector: str,
    jobs: Sequence[str],
    deadline_s: float,
    poll_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete every MPIJob, pod and ConfigMap ``selector`` finds in ``namespace`` (and, by ownership, what the
    MPI Operator made for them), then list them and the operator's objects of ``jobs`` again until none is
    left; what is still there after ``deadline_s`` is returned as ``kind/name``."""
    for kind in (MPIJOBS, PODS, CONFIGMAPS):
        path = kind.format(ns=namespace)
        for item in api.list(path, selector):
            api.delete(f"{path}/{item['metadata']['name']}")
    deadline = time.monotonic() + deadline_s
    wait = min(0.1, poll_s)  # the garbage collector often needs a moment only
    while True:
        remaining = left(api, namespace, selector, jobs)
        if not remaining or time.monotonic() >= deadline:
            return remaining
        sleep(wait)
        wait = min(wait * 2, poll_s)


def left(api: KubeApi, namespace: str, selector: str, jobs: Sequence[str]) -> list[str]:
    """What ``selector`` (and the operator's ``app=<job>`` of ``jobs``) still finds, as ``kind/name``."""
    found: list[str] = []
    for kind, template in (("mpijobs", MPIJOBS), ("pods", PODS), ("configmaps", CONFIGMAPS)):
        found += [
            f"{kind}/{item['metadata']['name']}" for item in api.list(template.format(ns=namespace), selector)
        ]
    if jobs:
        owned = f"app in ({','.join(jobs)})"
        for kind, template in OPERATOR_KINDS.items():
            try:
                items = api.list(template.format(ns=namespace), owned)
            except KubeApiError as exc:
                if exc.status in (403, 404):
                    continue  # a kind the user may not list, or an API the cluster lacks: its owner is gone
                raise
            found += [f"{kind}/{item['metadata']['name']}" for item in items]
    return sorted(set(found))
