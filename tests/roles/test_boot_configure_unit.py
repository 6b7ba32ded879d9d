"""roles/boot_configure's unit, rendered as the role renders it: its ordering at boot and its type."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "boot_configure"


def _render(tmp_path: Path) -> Path:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    template = jinja2.Template((ROLE / "templates" / "gpufleet-node-configure.service.j2").read_text())
    unit = tmp_path / "gpufleet-node-configure.service"
    unit.write_text(template.render(ansible_managed="Ansible managed", **defaults) + "\n")
    return unit


def test_the_unit_runs_after_the_boot_transaction_and_the_boot_does_not_wait_for_the_play(tmp_path) -> None:
    """The review of 2026-11-28: After=cloud-init.target with WantedBy=multi-user.target closed an ordering
    cycle on every image with cloud-init (cloud-init.target is ordered after multi-user.target; a target
    orders itself after what it wants), and a oneshot kept the boot's job queue open for the whole play, so
    `systemctl is-system-running --wait` (the local up's readiness) waited for every node's play."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(_render(tmp_path))
    after = parser["Unit"]["After"].split()
    assert "multi-user.target" in after and "network-online.target" in after, after
    assert not {"cloud-init.target", "cloud-final.service"} & set(after), after
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    service = parser["Service"]
    assert service["Type"] == "exec", "a oneshot's start job lasts the whole play: the boot waits for it"
    assert service["ExecCondition"].endswith("--check")
    assert service["RuntimeMaxSec"] == "1800" and "TimeoutStartSec" not in service
    # The play knows the limit, so a stop long before it (a node shut down) is not named the time limit;
    # and the last run's result is replaced by a started one before the start job ends.
    assert service["ExecStart"].endswith("--time-limit 1800")
    assert service["ExecStartPre"].endswith("--begin")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_reads_every_line_of_the_unit(tmp_path) -> None:
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(_render(tmp_path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
