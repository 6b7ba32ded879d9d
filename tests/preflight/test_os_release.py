"""The gcp_os_release and aws_os_release checks: node groups that boot different OS releases install
different Slurm releases (roles/slurm installs the distribution's), and slurmctld refuses a newer slurmd or
one too far behind (gpufleet.catalog.os_releases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.catalog import aws as aws_rules
from gpufleet.catalog import gcp as gcp_rules
from gpufleet.catalog import load_catalog
from gpufleet.preflight import Level, run_checks
from gpufleet.spec import parse_spec
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {"gcp_os_release", "aws_os_release"}
GCP = {"kind": "gcp", "project": "my-gpu-project", "region": "us-central1", "zone": "us-central1-a"}
AWS = {"kind": "aws", "region": "us-east-2", "zone": "us-east-2b"}
MINE = "projects/p1-project/global/images/family/mine"


def spec(provider: dict[str, Any], *groups: tuple[str, list[str], str], fabric: str = "ethernet"):
    data = {
        "name": "os1",
        "provider": provider,
        "node_groups": [
            {
                "name": name,
                "roles": roles,
                "instance_type": type_,
                **({"count": 2} if roles == ["compute"] else {}),
            }
            for name, roles, type_ in groups
        ],
        "fabric": fabric,
    }
    return parse_spec(yaml.safe_dump(data))


def found(cluster) -> list:
    return [f for f in run_checks(cluster, load_catalog()) if f.check in CHECKS]


HEAD = ("head", ["controller", "login"], "n2-standard-8")
MEGA = ("mega", ["compute"], "a3-megagpu-8g")
HIGH = ("high", ["compute"], "a3-highgpu-8g")
JAMMY = ("Ubuntu 22.04 (jammy)", "Slurm 21.08.5")
NOBLE = ("Ubuntu 24.04 (noble)", "Slurm 23.11.4")


@pytest.mark.parametrize(
    ("cluster", "level", "words"),
    [
        # the head node follows the GPU nodes' release (24.04 beside A3 Mega, 22.04 beside A3 High)
        (lambda: spec(GCP, HEAD, MEGA), None, ()),
        (lambda: spec(GCP, HEAD, HIGH), None, ()),
        (lambda: spec(GCP, HEAD, ("cpu", ["compute"], "n2-standard-8")), None, ()),
        # A3 High needs 22.04 (its TCPX kernel), A3 Mega Google's 24.04 accelerator image: the head follows
        # the first, and the other GPU group is refused either way round
        (
            lambda: spec(GCP, HEAD, HIGH, MEGA),
            Level.ERROR,
            ("'head' boots", "'high' boots", "'mega' boots", *JAMMY, *NOBLE,
             "slurmctld 21.08 (group 'head') refuses slurmd 23.11 (group 'mega')", "never a newer one",
             "To fix:", "provider.image"),
        ),
        (
            lambda: spec(GCP, HEAD, MEGA, HIGH),
            Level.ERROR,
            (*JAMMY, *NOBLE, "slurmctld 23.11 (group 'head') refuses slurmd 21.08 (group 'high')",
             "up to 2 older major releases"),
        ),
        # a controller on a GPU type: its own image decides
        (
            lambda: spec(GCP, ("ctl", ["controller"], "a3-highgpu-8g"), MEGA),
            Level.ERROR,
            ("slurmctld 21.08 (group 'ctl') refuses slurmd 23.11 (group 'mega')",),
        ),
        # one image the spec names for every group: one release, whatever it is
        (lambda: spec({**GCP, "image": MINE}, HEAD, HIGH, MEGA), None, ()),
        # AWS: the head node runs the plain Ubuntu of the GPU family's release, for every family
        *[
            (lambda family=family: spec({**AWS, "ami": {"family": family}}, HEAD_AWS, P5), None, ())
            for family in aws_rules.FAMILY_OS_RELEASE
        ],
        (lambda: spec({**AWS, "ami": {"id": "ami-0abc1234def567890"}}, HEAD_AWS, P5), None, ()),
    ],
)  # fmt: skip
def test_groups_on_different_os_releases(cluster, level, words) -> None:
    findings = found(cluster())
    if level is None:
        assert findings == [], findings
        return
    assert [f.level for f in findings] == [level], findings
    assert findings[0].path == "node_groups"
    for word in words:
        assert word in findings[0].message, (word, findings[0].message)


HEAD_AWS = ("head", ["controller", "login"], "m7i.2xlarge")
P5 = ("gpu", ["compute"], "p5.48xlarge")


def test_releases_slurm_accepts_are_a_warning(monkeypatch) -> None:
    # Debian 12's Slurm 22.05 is two releases behind 23.11: slurmctld accepts it, gpufleet still warns
    monkeypatch.setitem(gcp_rules.IMAGE_OS_RELEASE, "ubuntu-2204-lts", "debian-12")
    findings = found(spec(GCP, HEAD, MEGA, HIGH))
    assert [f.level for f in findings] == [Level.WARNING], findings
    assert "Debian 12 (bookworm) with Slurm 22.05.8" in findings[0].message, findings[0].message


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_every_shipped_example_boots_one_os_release(example: str) -> None:
    assert found(load_spec(ROOT / "examples" / example)) == []
