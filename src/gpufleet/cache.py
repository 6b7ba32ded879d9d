"""Where gpufleet keeps what it downloads or builds on the machine that runs it (``GPUFLEET_CACHE_DIR``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``GPUFLEET_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpufleet``, else ``~/.cache/gpufleet``."""
    configured = os.environ.get("GPUFLEET_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpufleet"
