"""Spec builders for the AWS program's tests (plain helpers; the fixtures are in conftest.py)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from gpufleet.spec import ClusterSpec

CREATED_AT = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)

BASE: dict[str, Any] = {
    "name": "fleet",
    "provider": {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
    ],
    "fabric": "efa",
    "tags": {"team": "ml"},
}


def aws_spec(**changes: Any) -> ClusterSpec:
    """The base AWS spec with top-level keys replaced; ``gpu={...}`` updates the compute group."""
    data = copy.deepcopy(BASE)
    gpu = changes.pop("gpu", None)
    if gpu:
        data["node_groups"][1].update(gpu)
    data.update(changes)
    return ClusterSpec.model_validate(data)
