"""The head node against the fleet it configures (gpufleet.preflight.head_size, ``gpufleet check``): the
projection of docs/architecture.md, 15 s + N x 9.66 s / the head's vCPUs, worked by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, run_checks
from gpufleet.preflight.head_size import head_size, projected_configure_s, vcpus_needed
from gpufleet.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def example(name: str, compute: int, head_type: str | None = None):
    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    for group in data["node_groups"]:
        if "compute" in group["roles"]:
            group["count"] = compute
        elif "controller" in group["roles"] and head_type:
            group["instance_type"] = head_type
    return parse_spec(yaml.safe_dump(data))


def test_the_projection_is_the_documented_arithmetic():
    assert projected_configure_s(1024, 8) == pytest.approx(15 + 1024 * 9.66 / 8)  # 1,251 s
    assert projected_configure_s(1024, 16) == pytest.approx(633.24)
    assert vcpus_needed(1024) == 17  # 1,024 x 9.66 / 585 = 16.9
    assert vcpus_needed(64) == 2


@pytest.mark.parametrize("name", ["aws-p5.yaml", "gcp-a3-mega.yaml", "gcp-a3-ultra.yaml"])
def test_the_examples_heads_are_big_enough_for_their_fleets(name):
    assert list(head_size(example(name, 4), load_catalog())) == []


@pytest.mark.parametrize(
    ("name", "head"), [("aws-p5.yaml", "m7i.2xlarge"), ("gcp-a3-mega.yaml", "n2-standard-8")]
)
def test_an_8_vcpu_head_for_1024_nodes_is_flagged_with_the_size_that_fits(name, head):
    found = [f for f in run_checks(example(name, 1024)) if f.check == "head_size"]
    assert [(f.level, f.path.endswith(".instance_type")) for f in found] == [(Severity.WARNING, True)], found
    message = found[0].message
    assert f"{head} has 8 vCPUs, about 21 min of configure for 1024 compute nodes" in message, message
    assert "at least 17 vCPUs keeps it under 10 min" in message, message


def test_a_16_vcpu_head_holds_512_nodes_but_not_1024():
    assert list(head_size(example("aws-p5.yaml", 512, "c7i.4xlarge"), load_catalog())) == []
    found = list(head_size(example("aws-p5.yaml", 1024, "c7i.4xlarge"), load_catalog()))
    assert len(found) == 1 and "about 11 min" in found[0].message, found


def test_local_and_bare_metal_clusters_configure_from_here_and_are_not_checked():
    local = parse_spec((ROOT / "examples" / "local.yaml").read_text())
    assert not [f for f in run_checks(local) if f.check == "head_size"]
