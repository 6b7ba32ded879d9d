"""The gcp_os_release and aws_os_release checks: node groups that boot different OS releases all run the one
Slurm roles/slurm builds (software.slurm), built once per release, so such a cluster costs one build per
release: information, never an error (gpufleet.catalog.os_releases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.catalog import aws as aws_rules
from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, run_checks
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
JAMMY = "'high' boots Ubuntu 22.04 (jammy)"
NOBLE = "'mega' boots Ubuntu 24.04 (noble)"


@pytest.mark.parametrize(
    ("cluster", "level", "words"),
    [
        # the head node follows the GPU nodes' release (24.04 beside A3 Mega, 22.04 beside A3 High)
        (lambda: spec(GCP, HEAD, MEGA), None, ()),
        (lambda: spec(GCP, HEAD, HIGH), None, ()),
        (lambda: spec(GCP, HEAD, ("cpu", ["compute"], "n2-standard-8")), None, ()),
        # A3 High needs 22.04 (its TCPX kernel), A3 Mega Google's 24.04 accelerator image: the head follows
        # the first; every node runs the one Slurm, built once per release
        (
            lambda: spec(GCP, HEAD, HIGH, MEGA),
            Severity.INFO,
            ("'head' boots Ubuntu 22.04 (jammy)", JAMMY, NOBLE,
             "Every node runs Slurm 24.11.5 (software.slurm)", "2 builds", "For one build:",
             "provider.image"),
        ),
        (
            lambda: spec(GCP, HEAD, MEGA, HIGH),
            Severity.INFO,
            ("'head' boots Ubuntu 24.04 (noble)", JAMMY, NOBLE),
        ),
        # a controller on a GPU type: its own image decides
        (
            lambda: spec(GCP, ("ctl", ["controller"], "a3-highgpu-8g"), MEGA),
            Severity.INFO,
            ("'ctl' boots Ubuntu 22.04 (jammy)", NOBLE),
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


def test_no_mix_of_releases_is_an_error_any_more() -> None:
    # Before one Slurm was built for every node, a 22.04 head beside 24.04 GPU nodes was refused (slurmctld
    # 21.08 refuses slurmd 23.11); now the same cluster is one finding of information.
    findings = found(spec(GCP, HEAD, HIGH, MEGA))
    assert [f.level for f in findings] == [Severity.INFO], findings


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_every_shipped_example_boots_one_os_release(example: str) -> None:
    assert found(load_spec(ROOT / "examples" / example)) == []
