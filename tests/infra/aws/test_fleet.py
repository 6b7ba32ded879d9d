"""One launch request per compute group: an instant, all-or-nothing EC2 Fleet that still feeds the
inventory one host at a time (issue 10, AWS 2)."""

from __future__ import annotations

import base64

import pytest
import yaml
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.aws.fleet import _nth, sorted_instance_ids
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import fake_id
from gpufleet.infra.tags import AWS_EXPIRES_TAG, expires_at_text
from gpufleet.inventory.stack import from_stack_outputs

FLEET = "aws:ec2/fleet:Fleet"
INSTANCE = "aws:ec2/instance:Instance"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
TAG = "aws:ec2/tag:Tag"


def test_each_compute_group_is_one_instant_all_or_nothing_fleet(plan_aws):
    spec = aws_spec(gpu={"count": 5})
    recorded = plan_aws(spec)
    (fleet,) = recorded.of_type(FLEET)
    assert fleet.name == "fleet-gpu-fleet"
    assert fleet.inputs["type"] == "instant", fleet.urn
    assert fleet.inputs["terminateInstances"] is True, fleet.urn
    target = fleet.inputs["targetCapacitySpecification"]
    assert target == {"defaultTargetCapacityType": "on-demand", "totalTargetCapacity": 5}, target
    options = fleet.inputs["onDemandOptions"]
    assert options["minTargetCapacity"] == 5, f"{fleet.urn}: not all-or-nothing: {options}"
    assert options["singleInstanceType"] and options["singleAvailabilityZone"], options
    (config,) = fleet.inputs["launchTemplateConfigs"]
    template = recorded.one(LT, "fleet-gpu-lt")
    assert config["launchTemplateSpecification"]["launchTemplateId"] == fake_id("lt-", template.name)
    private = fake_id("subnet-", "fleet-private")
    assert config["overrides"] == [{"instanceType": "p5.48xlarge", "subnetId": private}], config
    assert template.inputs["placement"]["groupName"], "the fleet's template launches into the placement group"
    compute = set(spec.host_names(spec.node_groups[1]))
    assert not compute & {r.name for r in recorded.of_type(INSTANCE)}, "a compute node is its own instance"


def test_the_inventory_lists_every_host_with_the_private_ip_of_its_instance(plan_aws):
    spec = aws_spec(gpu={"count": 4})
    recorded = plan_aws(spec)
    inventory = from_stack_outputs(recorded.outputs)
    names = [h for g in spec.node_groups for h in spec.host_names(g)]
    assert [host.name for host in inventory.hosts] == names
    expected = AwsMockCloud(spec)._address_of
    assert {host.name: host.private_ip for host in inventory.hosts} == expected
    assert len({host.private_ip for host in inventory.hosts}) == len(names)


def test_every_fleet_instance_carries_the_current_expiry_as_its_own_tag(plan_aws):
    spec = aws_spec(gpu={"count": 3}, lifetime={"ttl": "48h"})
    recorded = plan_aws(spec)
    tags = recorded.of_type(TAG)
    assert sorted(t.name for t in tags) == [f"fleet-gpu-{i}-expires" for i in range(3)]
    (fleet,) = recorded.of_type(FLEET)
    state = AwsMockCloud(spec).computed(FLEET, fleet.name, fleet.inputs, 0)
    ids = sorted_instance_ids([{"instance_ids": s["instanceIds"]} for s in state["fleetInstanceSets"]])
    assert len(ids) == 3
    for tag in tags:
        assert tag.inputs["key"] == AWS_EXPIRES_TAG, tag.urn
        assert tag.inputs["value"] == expires_at_text(spec, CREATED_AT), tag.urn
    assert sorted(t.inputs["resourceId"] for t in tags) == ids


def test_fleet_nodes_boot_one_shared_user_data_and_spot_is_the_fleets(plan_aws):
    recorded = plan_aws(aws_spec(gpu={"capacity": {"mode": "spot"}}))
    template = recorded.one(LT, "fleet-gpu-lt")
    config = yaml.safe_load(base64.b64decode(template.inputs["userData"]).decode())
    assert "hostname" not in config and config["disable_root"] is True, config
    assert "instanceMarketOptions" not in template.inputs, "EC2 Fleet buys spot itself"
    kinds = {t["resourceType"] for t in template.inputs["tagSpecifications"]}
    assert "instance" in kinds, "the provider's default tags do not reach a fleet's instances"
    (fleet,) = recorded.of_type(FLEET)
    assert fleet.inputs["targetCapacitySpecification"]["defaultTargetCapacityType"] == "spot"
    assert fleet.inputs["spotOptions"]["minTargetCapacity"] == 2


def test_capacity_blocks_and_reservations_keep_their_target_on_the_fleets_template(plan_aws):
    block = {"mode": "capacity_block", "reservation": "cr-0a1b2c3d4e5f60789"}
    recorded = plan_aws(aws_spec(gpu={"capacity": block}))
    template = recorded.one(LT, "fleet-gpu-lt")
    assert template.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = template.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0a1b2c3d4e5f60789"}
    (fleet,) = recorded.of_type(FLEET)
    assert fleet.inputs["targetCapacitySpecification"]["defaultTargetCapacityType"] == "capacity-block"


def test_the_aws_inventory_asks_ansible_to_set_host_names(tmp_path):
    from gpufleet.infra.aws.backend import backend
    from gpufleet.state import ClusterState

    spec = aws_spec()
    outputs = {
        "cluster": "fleet", "provider": "aws", "region": "us-east-1", "zone": "us-east-1a", "fabric": "efa",
        "expires_at": "2026-11-23T09:00:00Z", "head_node": "fleet-head", "filesystem": {"kind": "none"},
        "hosts": [{"name": "fleet-head", "roles": ["controller"], "private_ip": "10.0.0.4",
                   "instance_type": "m7i.xlarge", "cpus": 4, "memory_mb": 15000}],
    }  # fmt: skip
    state = ClusterState(spec.name, root=tmp_path)
    inventory = backend.inventory_from_outputs(spec, state, outputs)
    assert inventory.to_ansible()["all"]["vars"]["gpufleet_set_hostname"] is True


def test_a_fleet_that_launched_fewer_nodes_than_the_group_is_a_clear_error():
    assert sorted_instance_ids([{"instance_ids": ["i-b", "i-a"]}, {"instance_ids": ["i-c"]}]) == [
        "i-a",
        "i-b",
        "i-c",
    ]
    with pytest.raises(RuntimeError, match="launched 1 of 2 instances"):
        _nth(["i-a"], 1, 2, "fleet-gpu-fleet")
