"""A node lost after its fleet launched (a spot interruption, a manual termination) no longer blocks every
later ``up``: the host look-up tolerates it and the next ``up`` replaces its fleet, saying which host was
lost (issue 25, AWS audit 2026-11-24 N10)."""

from __future__ import annotations

from typing import Any

import boto3
import pulumi
import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.aws.backend import AwsBackend
from gpufleet.infra.aws.fleet import FLEET_TYPE, lost_fleets
from gpufleet.infra.aws.lost import lost_instances
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import run_offline
from gpufleet.infra.program import cluster_program

moto = pytest.importorskip("moto")

REGION = "us-east-1"
URN = "urn:pulumi:fleet::gpufleet::gpufleet:aws:GpuCluster$aws:ec2/fleet:Fleet::fleet-gpu-fleet"


def test_the_program_gives_a_lost_host_no_address_and_a_warning_instead_of_failing(monkeypatch):
    spec = aws_spec(gpu={"count": 2})
    cloud = AwsMockCloud(spec)
    cloud.lost_hosts = {"fleet-gpu-1"}
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    result = run_offline(lambda: cluster_program(spec, CREATED_AT), cloud, stack=spec.name)
    hosts = {host["name"]: host for host in result.outputs["hosts"]}
    assert hosts["fleet-gpu-1"]["private_ip"] == "", hosts["fleet-gpu-1"]
    assert hosts["fleet-gpu-0"]["private_ip"], hosts["fleet-gpu-0"]
    assert any("fleet-gpu-1" in line and "replaces the fleet" in line for line in warned), warned


def _deployment(ids: list[str]) -> dict[str, Any]:
    """``pulumi stack export``'s resources for one instant fleet and its hosts' expiry tags."""
    fleet = {
        "urn": URN,
        "type": FLEET_TYPE,
        "outputs": {
            "type": "instant",
            "region": REGION,
            "fleetInstanceSets": [{"instanceIds": ids, "instanceType": "c6i.large", "lifecycle": "spot"}],
            "targetCapacitySpecification": {"totalTargetCapacity": len(ids)},
        },
    }
    tags = [
        {
            "urn": URN.replace(
                "aws:ec2/fleet:Fleet::fleet-gpu-fleet", f"aws:ec2/tag:Tag::fleet-gpu-{i}-expires"
            ),
            "type": "aws:ec2/tag:Tag",
            "outputs": {"resourceId": instance, "key": "gpufleet:expires-at"},
        }
        for i, instance in enumerate(sorted(ids))
    ]
    return {"manifest": {}, "resources": [fleet, *tags]}


@pytest.fixture
def ec2(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with moto.mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _launch(ec2, count: int) -> list[str]:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    found = ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, InstanceType="c6i.large")
    return sorted(instance["InstanceId"] for instance in found["Instances"])


def test_the_next_up_replaces_a_fleet_whose_node_was_terminated_and_says_which(ec2):
    ids = _launch(ec2, 2)
    deployment = _deployment(ids)
    assert AwsBackend().replace_before_up(deployment) == {}, "a fleet whose nodes all run stays"
    ec2.terminate_instances(InstanceIds=[ids[1]])
    replace = AwsBackend().replace_before_up(deployment)
    assert list(replace) == [URN], replace
    assert f"fleet-gpu-1 ({ids[1]}) is terminated" in replace[URN], replace
    assert "fleet-gpu-0" not in replace[URN], replace


def test_an_instance_ec2_no_longer_lists_counts_as_lost(ec2):
    ids = _launch(ec2, 1)
    gone = "i-0123456789abcdef0"  # terminated over an hour ago: DescribeInstances no longer lists it
    replace = lost_fleets(_deployment([*ids, gone]), lambda region: boto3.client("ec2", region_name=region))
    assert f"({gone}) is gone" in replace[URN], replace


HEAD_URN = "urn:pulumi:fleet::gpufleet::gpufleet:aws:GpuCluster$aws:ec2/instance:Instance::fleet-head"


def _with_head(deployment: dict[str, Any], head: str) -> dict[str, Any]:
    """The deployment with the head node's ``aws.ec2.Instance`` (its id at the top, as ``pulumi stack
    export`` writes it) and the aws provider that names the region."""
    provider = {
        "urn": "urn:pulumi:fleet::gpufleet::pulumi:providers:aws::default_7_0_0",
        "type": "pulumi:providers:aws::default_7_0_0",
        "inputs": {"region": REGION},
    }
    instance = {
        "urn": HEAD_URN,
        "type": "aws:ec2/instance:Instance",
        "id": head,
        "outputs": {"instanceState": "running", "privateIp": "10.0.0.10"},
    }
    return {**deployment, "resources": [provider, instance, *deployment["resources"]]}


def test_the_next_up_replaces_a_terminated_head_node_and_keeps_a_stopped_one(ec2):
    head, *nodes = _launch(ec2, 3)
    deployment = _with_head(_deployment(nodes), head)
    assert AwsBackend().replace_before_up(deployment) == {}, "a running head stays"
    ec2.stop_instances(InstanceIds=[head])
    assert AwsBackend().replace_before_up(deployment) == {}, "a stopped head is the user's to start"
    ec2.terminate_instances(InstanceIds=[head])
    replace = AwsBackend().replace_before_up(deployment)
    assert list(replace) == [HEAD_URN], replace
    assert f"fleet-head ({head}) is terminated" in replace[HEAD_URN], replace


def test_a_head_node_ec2_no_longer_lists_is_replaced(ec2):
    gone = "i-0fedcba9876543210"
    replace = lost_instances(
        _with_head({"resources": []}, gone), lambda region: boto3.client("ec2", region_name=region)
    )
    assert f"fleet-head ({gone}) is gone" in replace[HEAD_URN], replace
