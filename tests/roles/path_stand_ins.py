"""Stand-in programs first on PATH, in place of a node's binaries (systemctl, scontrol, sinfo, ...), for role
tasks run with a local connection."""

from __future__ import annotations

from pathlib import Path

import pytest


def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripts: dict[str, str]) -> None:
    """Shell scripts (name -> body) in ``tmp_path/bin``, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin")
