"""The leftover finder knows EC2 Fleets by their state: a live one is a leftover, a deleted one is not,
even while the tagging API still lists it (issue 25, AWS audit N9)."""

from __future__ import annotations

from typing import Any

from test_aws_leftovers import REGION, aws  # noqa: F401 (the moto session fixture)

from gpufleet.infra.aws.leftovers import find_leftovers
from gpufleet.infra.tags import AWS_CLUSTER_TAG


def _fleet(session, cluster: str) -> str:
    ec2 = session.client("ec2")
    template = ec2.create_launch_template(
        LaunchTemplateName=f"{cluster}-gpu-lt",
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "t3.micro"},
    )["LaunchTemplate"]["LaunchTemplateId"]
    return ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {"LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "1"}}
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        TagSpecifications=[{"ResourceType": "fleet", "Tags": [{"Key": AWS_CLUSTER_TAG, "Value": cluster}]}],
    )["FleetId"]


def _tagging_remembers(session, arn: str, cluster: str) -> None:
    """The tagging API keeps listing a resource for a while after it is gone (moto forgets at once)."""

    def add(parsed: dict[str, Any], **_: Any) -> None:
        tags = [{"Key": AWS_CLUSTER_TAG, "Value": cluster}]
        parsed.setdefault("ResourceTagMappingList", []).append({"ResourceARN": arn, "Tags": tags})

    session.events.register("after-call.resource-groups-tagging-api.GetResources", add)


def test_a_live_fleet_is_a_leftover_and_a_deleted_one_is_not(aws):  # noqa: F811
    fleet_id = _fleet(aws, "llm-p5")
    _fleet(aws, "other")
    _tagging_remembers(aws, f"arn:aws:ec2:{REGION}:123456789012:fleet/{fleet_id}", "llm-p5")
    fleets = [f for f in find_leftovers("llm-p5", REGION, session=aws) if f.kind == "ec2 fleet"]
    assert [f.id for f in fleets] == [fleet_id], [str(f) for f in fleets]
    aws.client("ec2").delete_fleets(FleetIds=[fleet_id], TerminateInstances=True)
    found = find_leftovers("llm-p5", REGION, session=aws)
    assert not [f for f in found if fleet_id in f.id], [str(f) for f in found]
