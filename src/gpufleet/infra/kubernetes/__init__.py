"""``provider: kubernetes``: a Kubernetes cluster handed over (kubeconfig and context); nothing is made."""

from gpufleet.infra.kubernetes.backend import backend

__all__ = ["backend"]
