"""Where gpufleet's own files are: the checkout that holds playbooks/, roles/ and ansible.cfg (a leaf: the
runner, the bake's content hash, the monitoring rules and the training job all read it)."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.errors import EnvironmentProblem


def project_root() -> Path:
    """The folder holding playbooks/, roles/ and ansible.cfg (a gpufleet checkout)."""
    configured = os.environ.get("GPUFLEET_HOME")
    candidates = [Path(configured)] if configured else []
    candidates.append(Path(__file__).resolve().parents[2])
    for candidate in candidates:
        if (candidate / "playbooks" / "site.yml").exists() and (candidate / "roles").is_dir():
            return candidate
    raise EnvironmentProblem(
        "cannot find gpufleet's playbooks and roles",
        hint="run gpufleet from a checkout (pip install -e .), or set GPUFLEET_HOME to the checkout",
    )
