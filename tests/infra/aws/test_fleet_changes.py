"""A compute group's fleet is replaced whole, never modified; a short launch says EC2's reasons and is
replaced by the next ``up`` (issue 25, AWS audit N1, N2, N20)."""

from __future__ import annotations

import inspect
import re
from typing import Any

import boto3
import pulumi
import pulumi_aws as aws
import pytest
from aws_specs import CREATED_AT, aws_spec
from botocore.stub import Stubber
from test_replan import Cloud, compared

from gpufleet.infra.aws import fleet as fleet_module
from gpufleet.infra.aws.backend import AwsBackend
from gpufleet.infra.aws.fleet import REPLACED_ON, _nth, launch_errors, short_fleets
from gpufleet.infra.plan import run_offline
from gpufleet.infra.program import cluster_program

FLEET = "aws:ec2/fleet:Fleet"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


def plan(spec, cloud: Cloud) -> tuple[dict[str, dict[str, Any]], dict[str, pulumi.ResourceOptions]]:
    """Each fleet's compared inputs and resource options, and the templates' inputs."""
    options: dict[str, pulumi.ResourceOptions] = {}

    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            cloud.ignored[args.name] = list(args.opts.ignore_changes or [])
            options[args.name] = args.opts

        pulumi.runtime.register_stack_transformation(keep)
        return cluster_program(spec, CREATED_AT)

    result = run_offline(program, cloud, stack=spec.name)
    inputs = {r.name: compared(r.inputs, cloud.ignored.get(r.name, [])) for r in result.resources}
    types = {r.name: r.type for r in result.resources}
    return {name: inputs[name] for name in inputs if types[name] in (FLEET, TEMPLATE)}, options


PROVIDER = {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"}


@pytest.mark.parametrize(
    "edit",
    [
        {"gpu": {"count": 3}},
        {"gpu": {"root_volume_gib": 400}},
        {"gpu": {"instance_type": "p4d.24xlarge"}},
        {"provider": {**PROVIDER, "ami": {"id": "ami-0fedcba9876543210"}}},
        {"access": {"ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOther user@laptop"}},
    ],
    ids=["count", "root_volume", "instance_type", "image", "key"],
)
def test_a_changed_compute_group_replaces_its_fleet_first_deleting_the_old_one(edit):
    """EC2 refuses ModifyFleet for an instant fleet, and the provider calls it for any non-tag change:
    every input that differs must force a replacement, deleting the old fleet first."""
    base = {"provider": {**PROVIDER, "ami": {"id": "ami-0123456789abcdef0"}}}
    first_spec = aws_spec(**base)
    first, _ = plan(first_spec, Cloud(first_spec, "20261101"))
    templates = {name: inputs for name, inputs in first.items() if name.endswith("-lt")}
    second_spec = aws_spec(**{**base, **edit})
    second, options = plan(second_spec, Cloud(second_spec, "20261101", previous=templates))
    before, after = first["fleet-gpu-fleet"], second["fleet-gpu-fleet"]
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    assert changed, f"the edit {edit} did not reach the fleet"
    opts = options["fleet-gpu-fleet"]
    forced = set(opts.replace_on_changes or [])
    assert set(changed) - {"tags"} <= forced, (
        f"{changed} would call ModifyFleet (replace_on_changes: {forced})"
    )
    assert opts.delete_before_replace is True, "a full reservation has no room for old and new fleet"
    assert opts.custom_timeouts is not None and opts.custom_timeouts.delete == fleet_module.DELETE_TIMEOUT


def test_every_fleet_input_but_its_tags_forces_a_replacement():
    params = set(inspect.signature(aws.ec2.FleetArgs.__init__).parameters) - {"self", "__self__", "tags"}
    camel = {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), p) for p in params}
    assert camel <= set(REPLACED_ON), sorted(camel - set(REPLACED_ON))


# DescribeFleets of an instant fleet that launched nothing, as EC2 answers it (API_DescribeFleets;
# the message is EC2's InsufficientInstanceCapacity text, docs.aws.amazon.com/AWSEC2/latest/UserGuide/
# troubleshooting-launch.html#troubleshooting-launch-capacity, read 2026-11-24).
ICE = (
    "We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested "
    "(us-east-1a). Our system will be working on provisioning additional capacity."
)
QUOTA = (
    "You have requested more vCPU capacity than your current vCPU limit of 192 allows for the instance "
    "bucket that the specified instance type belongs to."
)


def _describe(errors: list[dict[str, Any]]) -> dict[str, Any]:
    override = {
        "LaunchTemplateSpecification": {"LaunchTemplateId": "lt-0abc", "Version": "1"},
        "Overrides": {"InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a"},
    }
    return {
        "Fleets": [
            {
                "FleetId": "fleet-0a1b2c3d-4e5f-6789-abcd-ef0123456789",
                "FleetState": "active",
                "Type": "instant",
                "TargetCapacitySpecification": {"TotalTargetCapacity": 2},
                "Errors": [
                    {"LaunchTemplateAndOverrides": override, "Lifecycle": "on-demand", **e} for e in errors
                ],
                "Instances": [],
            }
        ]
    }


def test_a_short_launch_says_ec2s_own_error_codes_and_messages():
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    fleet_id = "fleet-0a1b2c3d-4e5f-6789-abcd-ef0123456789"
    errors = [
        {"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": ICE},
        {"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": ICE},
        {"ErrorCode": "VcpuLimitExceeded", "ErrorMessage": QUOTA},
    ]
    with Stubber(client) as stub:
        stub.add_response("describe_fleets", _describe(errors), {"FleetIds": [fleet_id]})
        lines = launch_errors(client, fleet_id)
    assert lines == [f"InsufficientInstanceCapacity: {ICE}", f"VcpuLimitExceeded: {QUOTA}"]
    with pytest.raises(RuntimeError) as raised:
        _nth([], 0, 2, "fleet-gpu-fleet", lambda: lines)
    message = str(raised.value)
    assert "launched 0 of 2" in message and "InsufficientInstanceCapacity" in message, message
    assert "VcpuLimitExceeded" in message and "vCPU limit of 192" in message, message
    # from a Pulumi project (stacks/, CI) the error names the command that replaces it (AWS audit M7)
    urn = "urn:pulumi:p5-fsx::gpufleet::gpufleet:aws:GpuCluster$aws:ec2/fleet:Fleet::llm-p5-gpu-fleet"
    with pytest.raises(RuntimeError, match=r"pulumi up --replace 'urn:pulumi:p5-fsx::.*llm-p5-gpu-fleet'"):
        _nth([], 0, 2, "llm-p5-gpu-fleet", lambda: lines, urn)


def _state(fleet_ids: list[str], target: int) -> dict[str, Any]:
    """A resource of ``pulumi stack export`` as the provider stores an instant fleet."""
    return {
        "urn": "urn:pulumi:fleet::gpufleet::gpufleet:aws:GpuCluster$aws:ec2/fleet:Fleet::fleet-gpu-fleet",
        "custom": True,
        "id": "fleet-0a1b2c3d-4e5f-6789-abcd-ef0123456789",
        "type": FLEET,
        "outputs": {
            "type": "instant",
            "fleetState": "active",
            "fleetInstanceSets": (
                [{"instanceIds": fleet_ids, "instanceType": "p5.48xlarge", "lifecycle": "on-demand"}]
                if fleet_ids
                else []
            ),
            "targetCapacitySpecification": {
                "defaultTargetCapacityType": "on-demand",
                "totalTargetCapacity": target,
            },
        },
    }


def test_the_next_up_replaces_a_fleet_whose_launch_came_short_and_keeps_a_full_one(monkeypatch):
    short = _state([], 2)
    full = {**_state(["i-0aaa", "i-0bbb"], 2), "urn": short["urn"].replace("gpu-fleet", "cpu-fleet")}
    deployment = {"manifest": {}, "resources": [short, full]}
    assert short_fleets(deployment) == [short["urn"]]
    # Every node of the full fleet runs (test_lost_node.py asks EC2 for real).
    monkeypatch.setattr(fleet_module, "lost_fleets", lambda deployment, client: {})
    assert AwsBackend().replace_before_up(deployment) == {short["urn"]: "its last launch came short"}
    assert short_fleets({}) == []
