"""stacks/: the AWS stack configs name an existing AWS example spec, and __main__.py runs it under mocks."""

from __future__ import annotations

import json
import runpy
from datetime import datetime
from pathlib import Path

import pulumi
import pytest
import yaml

from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import run_offline
from gpufleet.infra.tags import expires_at
from gpufleet.spec.load import load_spec

STACKS = Path(__file__).resolve().parents[3] / "stacks"
AWS_STACKS = ["Pulumi.p5-fsx.yaml", "Pulumi.p4d-spot.yaml", "Pulumi.p5-capacity-block.yaml"]


def stack_config(name: str) -> dict[str, str]:
    return yaml.safe_load((STACKS / name).read_text(encoding="utf-8"))["config"]


@pytest.mark.parametrize("name", AWS_STACKS)
def test_stack_config_points_at_its_spec(name):
    config = stack_config(name)
    spec = load_spec(STACKS / config["gpufleet:spec"])
    assert spec.provider.kind == "aws", name
    assert config["aws:region"] == spec.provider.region, f"{name}: aws:region differs from the spec's"
    # No shipped stack pins its creation time (a fixed date makes every cluster born from it expired):
    # gpufleet stack-pin writes it before each pulumi up (tests/infra/test_stack_pin.py).
    assert "gpufleet:createdAt" not in config, f"{name} pins gpufleet:createdAt"


@pytest.mark.parametrize("name", AWS_STACKS)
def test_entry_point_runs_the_program_with_the_pinned_expiry(name, tmp_path):
    config = {**stack_config(name), "gpufleet:createdAt": "2026-11-22T09:00:00Z"}  # as stack-pin writes it
    # the Capacity Block example's placeholder id is refused by the check: its user names their block
    shipped = STACKS / config["gpufleet:spec"]
    text = shipped.read_text(encoding="utf-8").replace("cr-0123456789abcdef0", "cr-0a1b2c3d4e5f60789")
    (tmp_path / shipped.name).write_text(text, encoding="utf-8")
    config["gpufleet:spec"] = str(tmp_path / shipped.name)
    spec = load_spec(tmp_path / shipped.name)

    def program() -> None:
        pulumi.runtime.set_all_config({k: str(v) for k, v in config.items()})
        runpy.run_path(str(STACKS / "__main__.py"), run_name="__main__")

    plan = run_offline(program, AwsMockCloud(spec), stack=name)
    (provider,) = plan.of_type("pulumi:providers:aws")
    tags = provider.inputs["defaultTags"]
    tags = (json.loads(tags) if isinstance(tags, str) else tags)["tags"]
    created = datetime.fromisoformat(config["gpufleet:createdAt"].replace("Z", "+00:00"))
    assert tags["gpufleet:expires-at"] == expires_at(spec, created).strftime("%Y-%m-%dT%H:%M:%SZ"), (
        provider.urn
    )
    instances = plan.of_type("aws:ec2/instance:Instance")
    fleets = plan.of_type("aws:ec2/fleet:Fleet")
    launched = len(instances) + sum(
        f.inputs["targetCapacitySpecification"]["totalTargetCapacity"] for f in fleets
    )
    assert launched == sum(g.count for g in spec.node_groups), [r.urn for r in instances + fleets]


def test_the_capacity_block_stack_is_refused_until_its_user_names_a_block():
    """AWS audit 2026-11-27 M4: the example's placeholder reservation passed the check, and a pulumi up
    made the VPC, NAT, head and a 4.8 TB file system before the fleet failed. Failed on main at bc3d77c."""
    from gpufleet.catalog import load_catalog
    from gpufleet.preflight import Severity, run_checks

    spec = load_spec(STACKS / stack_config("Pulumi.p5-capacity-block.yaml")["gpufleet:spec"])
    errors = [f for f in run_checks(spec, load_catalog()) if f.level is Severity.ERROR]
    assert [f.check for f in errors] == ["aws_reservation_ids"], errors
    assert "placeholder" in errors[0].message and errors[0].path.endswith("capacity.reservation"), errors
