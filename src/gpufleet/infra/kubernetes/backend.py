"""``backend`` for ``provider: kubernetes``: a cluster the user hands over is the cluster.

``up`` makes nothing: it surveys the cluster (``gpufleet.kube.survey``: the namespace, the MPI Operator, the
GPU Operator, the fabric's device plugin, the nodes against the catalog and the spec's count), refuses it
with every missing piece named, and returns the nodes as the inventory's compute hosts. ``destroy`` removes
whatever any validation run of this cluster left (every object labelled ``gpufleet.io/cluster=<name>`` in the
namespace), ``leftovers`` lists them again; the cluster itself, its nodes and its operators are the user's and
stay. Nodes that validation cordoned stay cordoned (``validation.drain_bad_nodes``; docs/kubernetes.md says
how to undo it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.kube.api import api_for
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, KubernetesProvider, SchedulerKind
from gpufleet.state import ClusterState

CLEANUP_S = 180.0  # how long destroy waits for Kubernetes' garbage collector to remove owned objects


def _provider(spec: ClusterSpec) -> KubernetesProvider:
    assert isinstance(spec.provider, KubernetesProvider)
    return spec.provider


def _namespace(spec: ClusterSpec) -> str:
    options = spec.scheduler.kubernetes
    assert options is not None
    return options.namespace


class KubernetesBackend:
    kind = "kubernetes"
    kept_without_state = ""

    def check_credentials(self, spec: ClusterSpec) -> None:
        """The kubeconfig must exist (its credentials are tried by the first call, not here)."""
        from gpufleet.kube.api import kubeconfig_path

        path = kubeconfig_path(_provider(spec).kubeconfig)
        if not path.is_file():
            raise EnvironmentProblem(
                f"the kubeconfig {path} does not exist",
                hint="set provider.kubeconfig (or $KUBECONFIG) to the kubeconfig (docs/kubernetes.md)",
            )

    def found_without_state(self, spec: ClusterSpec) -> list[str]:
        return []

    def software_overrides(self, spec: ClusterSpec) -> dict[str, Any]:
        """No role runs on the cluster's nodes: gpufleet's monitoring stack and enroot/pyxis are not there
        (the
        GPU Operator's dcgm-exporter has the GPUs' figures)."""
        return {"monitoring": False, "containers": False}

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: Any | None = None,
    ) -> Inventory:
        """The cluster's nodes as the inventory (nothing is made; ``baked`` is None: nothing is baked)."""
        from gpufleet.catalog import load_catalog
        from gpufleet.kube.survey import READY_HINT, survey

        api = api_for(spec)
        with reporter.step(f"survey the Kubernetes cluster at {api.host}"):
            found = survey(api, spec, load_catalog())
        refusal = found.refusal(api.host)
        if refusal:
            raise ProvisionError(refusal, hint=READY_HINT)
        for problem in found.problems:
            reporter.info(f"{problem.what}: {problem.message}")
        return Inventory(
            cluster=spec.name,
            provider=self.kind,
            fabric=spec.fabric.kind,
            hosts=found.hosts(spec.compute_groups[0].instance_type),
            scheduler=SchedulerKind.KUBERNETES,
        )

    def status(self, spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
        provider = _provider(spec)
        return {"kubernetes": {"context": provider.context, "namespace": _namespace(spec)}}

    def destroy(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """Every object a validation run of this cluster left in the namespace (none when runs ended well)."""
        from gpufleet.kube.cleanup import LABEL_CLUSTER, delete_and_prove

        api = api_for(spec)
        selector = f"{LABEL_CLUSTER}={spec.name}"
        before = self.leftovers(spec, state, reporter)
        delete_and_prove(api, _namespace(spec), selector, [], CLEANUP_S, 2.0)
        return before

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """What the cluster's label still finds in the namespace (MPIJobs, pods, ConfigMaps)."""
        from gpufleet.kube.cleanup import LABEL_CLUSTER, left

        return left(api_for(spec), _namespace(spec), f"{LABEL_CLUSTER}={spec.name}", [])

    def forget(self, spec: ClusterSpec, state: ClusterState) -> list[str]:
        return []

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        return Connection()  # nothing is reached over SSH


backend = KubernetesBackend()
