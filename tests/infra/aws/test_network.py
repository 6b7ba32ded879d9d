"""The network: a new VPC with private subnet, NAT and S3 endpoint in the one zone; or the given one."""

from __future__ import annotations

import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import fake_id, run_offline
from gpufleet.infra.program import cluster_program

NETWORK_TYPES = {
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/eip:Eip",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
}


def test_new_network_in_one_zone(plan_aws):
    recorded = plan_aws(aws_spec())
    subnets = {s.name: s for s in recorded.of_type("aws:ec2/subnet:Subnet")}
    assert set(subnets) == {"fleet-private", "fleet-public"}
    for subnet in subnets.values():
        assert subnet.inputs["availabilityZone"] == "us-east-1a", subnet.urn
        assert subnet.inputs["mapPublicIpOnLaunch"] is False, subnet.urn
    (nat,) = recorded.of_type("aws:ec2/natGateway:NatGateway")
    assert nat.inputs["subnetId"] == fake_id("subnet-", "fleet-public"), nat.urn
    tables = {t.name: t for t in recorded.of_type("aws:ec2/routeTable:RouteTable")}
    private_routes = tables["fleet-private-rt"].inputs["routes"]
    assert private_routes == [{"cidrBlock": "0.0.0.0/0", "natGatewayId": fake_id("nat-", "fleet-nat")}]
    (endpoint,) = recorded.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3", endpoint.urn
    assert endpoint.inputs["vpcEndpointType"] == "Gateway", endpoint.urn
    assert endpoint.inputs["routeTableIds"] == [fake_id("rtb-", "fleet-private-rt")], endpoint.urn
    for template in recorded.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        subnets_used = {n["subnetId"] for n in template.inputs["networkInterfaces"]}
        assert subnets_used == {fake_id("subnet-", "fleet-private")}, template.urn


def test_existing_vpc_and_subnet_create_no_network(plan_aws):
    provider = {**aws_spec().provider.model_dump(), "vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234"}
    recorded = plan_aws(aws_spec(provider=provider))
    made = {r.type for r in recorded.resources} & NETWORK_TYPES
    assert made == set(), f"created network resources: {made}"
    for group in recorded.of_type("aws:ec2/securityGroup:SecurityGroup"):
        assert group.inputs["vpcId"] == "vpc-0abc1234", group.urn
    for template in recorded.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        assert {n["subnetId"] for n in template.inputs["networkInterfaces"]} == {"subnet-0abc1234"}, (
            template.urn
        )


def test_an_existing_subnet_outside_the_zone_or_vpc_is_refused_before_any_node(monkeypatch):
    """The subnet override (ParallelCluster's Networking/SubnetId): read with get_subnet, refused with the
    cause and the fix when it is not in provider.zone and provider.vpc_id."""
    provider = {**aws_spec().provider.model_dump(), "vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234"}
    spec = aws_spec(provider=provider)
    cloud = AwsMockCloud(spec)
    cloud.subnets["subnet-0abc1234"] = {"availabilityZone": "us-east-1b", "vpcId": "vpc-0def5678"}
    with pytest.raises(Exception) as raised:
        run_offline(lambda: cluster_program(spec, CREATED_AT), cloud, stack=spec.name)
    message = str(raised.value)
    assert "provider.subnet_id subnet-0abc1234: it is in us-east-1b, not provider.zone us-east-1a" in message
    assert "it belongs to vpc-0def5678, not provider.vpc_id vpc-0abc1234" in message, message


def test_a_fleet_launches_into_the_clusters_subnet_as_parallelclusters_override_names_it(plan_aws):
    provider = {**aws_spec().provider.model_dump(), "vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234"}
    recorded = plan_aws(aws_spec(provider=provider))
    (fleet,) = recorded.of_type("aws:ec2/fleet:Fleet")
    (config,) = fleet.inputs["launchTemplateConfigs"]
    assert config["overrides"] == [{"instanceType": "p5.48xlarge", "subnetId": "subnet-0abc1234"}], config
