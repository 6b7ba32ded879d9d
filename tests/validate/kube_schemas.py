"""Rendered Kubernetes objects against the schemas their API servers apply.

Core kinds (Pod, ConfigMap, and each MPIJob replica's pod template as a PodTemplate) go through
kubernetes-validate (strict: an unknown field is an error) at the Kubernetes version below; an MPIJob goes
through the MPI Operator's constraints (data/kubernetes/mpijob-v2beta1.yaml, written from
kubeflow/mpi-operator@caa3c47 line by line) and the operator's job-name rule.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = (
    "1.33.0"  # EKS, GKE and AKS all offer 1.33 in 2026; kubernetes-validate ships its schemas
)
MPIJOB_SCHEMA = yaml.safe_load(
    (Path(__file__).parent / "data" / "kubernetes" / "mpijob-v2beta1.yaml").read_text()
)
# validation.go:55-66: "<name>-worker-<replicas - 1>" must be a DNS-1035 label (apimachinery IsDNS1035Label)
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _core(obj: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(part) for part in exc.path)
        return [f"{obj.get('kind')} {where}: {exc.message}"]
    return []


def problems(obj: dict[str, Any]) -> list[str]:
    """Why the API server (or the MPI Operator) would refuse ``obj``; empty when it would accept it."""
    if obj.get("kind") != "MPIJob":
        return _core(obj)
    validator = jsonschema.Draft7Validator(MPIJOB_SCHEMA)
    found = [
        f"MPIJob {'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(obj)
    ]
    replicas = (obj.get("spec") or {}).get("mpiReplicaSpecs") or {}
    for role, replica in replicas.items():
        template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{obj['metadata'].get('name')}-{role.lower()}"},
            "template": replica.get("template") or {},
        }
        found += [f"{role}: {problem}" for problem in _core(template)]
    workers = ((replicas.get("Worker") or {}).get("replicas")) or 1
    hostname = f"{obj['metadata'].get('name')}-worker-{workers - 1}"
    if len(hostname) > 63 or not _DNS1035.match(hostname):
        found.append(f"MPIJob metadata.name: worker host name {hostname} is not a DNS-1035 label")
    return found
