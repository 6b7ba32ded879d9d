"""The ``pulumi`` command the Automation API runs (a leaf: the stack driver, the adopted stacks and the bake
all ask it, and it asks nothing of them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpufleet.errors import EnvironmentProblem

PULUMI_INSTALL = (
    "install the Pulumi CLI: 'curl -fsSL https://get.pulumi.com | sh' and add ~/.pulumi/bin to PATH "
    "(see https://www.pulumi.com/docs/install/)"
)


def pulumi_cli() -> Path:
    """The ``pulumi`` command the Automation API will run, or ``EnvironmentProblem`` saying how to get it."""
    found = shutil.which("pulumi")
    if found is None:
        home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
        candidate = home / "bin" / "pulumi"
        found = str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    if found is None:
        raise EnvironmentProblem(
            "the Pulumi CLI is missing: 'gpufleet up/status/down' on a cloud drive Pulumi's engine "
            "through the Automation API, which runs the 'pulumi' command ('gpufleet plan' needs none)",
            hint=PULUMI_INSTALL,
        )
    return Path(found)
