"""The NCCL environment lint (``validate/nccl_lint.py``) over what a cluster's nodes will get: the
inventory's override of the fabric role's settings (``gpufleet_nccl_env``), from the bare-metal provider's
hand-written inventory or the inventory ``up`` recorded for the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpufleet.catalog import Catalog
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec
from gpufleet.validate.nccl_lint import lint

OVERRIDE_VAR = "gpufleet_nccl_env"


def _override(path: Path) -> dict[str, Any]:
    """The ``gpufleet_nccl_env`` of an Ansible YAML inventory's all.vars (empty when unreadable: the
    inventory checks say why)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    group = data.get("all") if isinstance(data, dict) else None
    found = (group or {}).get("vars", {}).get(OVERRIDE_VAR) if isinstance(group, dict) else None
    return found if isinstance(found, dict) else {}


@check("nccl_env_lint", providers=("local", "aws", "gcp", "azure", "baremetal", "kubernetes"))
def nccl_env_lint(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    from gpufleet.state import ClusterState

    # A hand-written inventory (bare metal names one in the spec), else the one up recorded.
    named = getattr(spec.provider, "inventory", None)
    path = Path(named) if isinstance(named, str) else ClusterState.for_name(spec.name).inventory_file
    if not path.is_file():
        return
    for found in lint(spec.fabric.kind, _override(path), f"{OVERRIDE_VAR} in {path}"):
        yield Finding(Severity.WARNING, "nccl_env_lint", f"{OVERRIDE_VAR}.{found.variable}", found.message)
