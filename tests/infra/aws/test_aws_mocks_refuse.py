"""The AWS mocks answer image lookups as EC2 does: only images a publisher lists under the owners and name
patterns gpufleet asks for (``AwsMockCloud.public_amis``, each line sourced in infra/aws/mocks.py), the
provider's error when nothing matches, a fleet's instance ids in no order the program may rely on, and
the refusal of inputs EC2 refuses (tag limits, the enums of the calls gpufleet makes)."""

from __future__ import annotations

import dataclasses

import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.catalog import aws as rules
from gpufleet.infra.aws.mocks import AMAZON_ACCOUNT, AwsMockCloud
from gpufleet.infra.program import plan_spec

NO_RESULTS = "Your query returned no results"


def lookup(cloud: AwsMockCloud, owner: str, pattern: str, arch: str = "x86_64") -> dict[str, object]:
    filters = [{"name": "name", "values": [pattern]}, {"name": "architecture", "values": [arch]}]
    return cloud.invoke("aws:ec2/getAmi:getAmi", {"owners": [owner], "filters": filters, "mostRecent": True})


@pytest.mark.parametrize("family", sorted(rules.AMI_FAMILIES))
@pytest.mark.parametrize("arch", rules.ARCHITECTURES)
def test_every_catalog_family_finds_an_image_its_publisher_names(family, arch):
    query = rules.AMI_FAMILIES[family]
    image = lookup(AwsMockCloud(aws_spec()), query.owner, query.pattern(arch), arch)
    owner = AMAZON_ACCOUNT if query.owner == "amazon" else query.owner
    assert (image["ownerId"], image["architecture"]) == (owner, arch), image
    assert str(image["name"]).startswith(query.pattern(arch).rstrip("*")), image


@pytest.mark.parametrize(
    ("owner", "pattern"),
    [
        # Canonical publishes 24.04 under hvm-ssd-gp3 only.
        (rules.CANONICAL_OWNER, "ubuntu/images/hvm-ssd/ubuntu-noble-24.04-amd64-server-*"),
        # The right name under the wrong owner.
        ("amazon", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"),
        # EC2's name filter is case-sensitive: it is "Nvidia".
        ("amazon", "Deep Learning Base OSS NVIDIA Driver GPU AMI (Ubuntu 22.04) *"),
        # No wildcard: only an exact name matches.
        ("amazon", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)"),
    ],
    ids=["noble-on-hvm-ssd", "wrong-owner", "case", "no-wildcard"],
)
def test_a_pattern_no_publisher_uses_fails_as_the_provider_does(owner, pattern):
    with pytest.raises(RuntimeError, match=NO_RESULTS):
        lookup(AwsMockCloud(aws_spec()), owner, pattern)


def test_a_catalog_pattern_with_a_typo_fails_the_plan(monkeypatch):
    """The defect the lookups guard: a family pattern EC2 lists nothing for stops ``up`` at the lookup."""
    spec = aws_spec()
    family = spec.provider.ami.family  # type: ignore[union-attr]
    query = rules.AMI_FAMILIES[family]
    typo = dataclasses.replace(query, name_pattern=query.name_pattern.replace("22.04", "22.4"))
    assert typo != query, f"{family}: the test's typo changed nothing"
    monkeypatch.setitem(rules.AMI_FAMILIES, family, typo)
    with pytest.raises(Exception, match=NO_RESULTS):
        plan_spec(spec, CREATED_AT)


def test_a_later_day_finds_the_newest_image():
    cloud = AwsMockCloud(aws_spec())
    query = rules.AMI_FAMILIES["dlami-base-ubuntu-22.04"]
    before = lookup(cloud, query.owner, query.name_pattern)
    cloud.publish("20261215")
    after = lookup(cloud, query.owner, query.name_pattern)
    assert str(after["name"]).endswith("20261215") and after["imageId"] != before["imageId"], (before, after)


def test_a_fleets_instance_ids_come_in_no_sorted_order():
    """EC2 documents no order for a fleet's instances: the mock shuffles them (seeded), so a program that
    took the listed order for the host order would name hosts wrongly; the program sorts them."""
    spec = aws_spec(gpu={"count": 6})
    cloud = AwsMockCloud(spec)
    group = spec.node_groups[1].name
    inputs = {"targetCapacitySpecification": {"totalTargetCapacity": 6}}
    state = cloud.computed("aws:ec2/fleet:Fleet", f"{spec.name}-{group}-fleet", inputs, 0)
    ids = state["fleetInstanceSets"][0]["instanceIds"]
    assert len(ids) == 6 and ids != sorted(ids), ids


@pytest.mark.parametrize(
    ("type_", "inputs", "named"),
    [
        ("aws:ec2/placementGroup:PlacementGroup", {"strategy": "clustered"}, "strategy"),
        ("aws:ec2/fleet:Fleet", {"type": "on-demand"}, "type"),
        ("aws:ec2/launchTemplate:LaunchTemplate", {"metadataOptions": {"httpTokens": "true"}}, "httpTokens"),
        (
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"metadataOptions": {"httpPutResponseHopLimit": 65}},
            "HopLimit",
        ),
        (
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"blockDeviceMappings": [{"ebs": {"volumeType": "gp4"}}]},
            "gp4",
        ),
        ("aws:ec2/vpc:Vpc", {"tags": {"aws:cluster": "x"}}, "aws:cluster"),
        ("aws:ec2/vpc:Vpc", {"tags": {"k" * 129: "x"}}, "kkkk"),
        ("aws:ec2/vpc:Vpc", {"tags": {"note": "x" * 257}}, "note"),
    ],
    ids=[
        "strategy",
        "fleet-type",
        "http-tokens",
        "hop-limit",
        "volume-type",
        "aws-prefix",
        "key-129",
        "value-257",
    ],
)
def test_inputs_ec2_refuses_fail_under_the_mocks(type_, inputs, named):
    with pytest.raises(RuntimeError, match=f"InvalidParameterValue: .*{named}"):
        AwsMockCloud(aws_spec()).computed(type_, "x", inputs, 0)
