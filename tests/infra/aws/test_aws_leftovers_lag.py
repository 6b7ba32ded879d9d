"""The AWS leftover check after a destroy, against moto: an ARN the tagging API still lists is asked of its
own Describe call, and one that call says is gone is no leftover, also when it goes between two polls.

The tagging API's lag is modelled at the client boundary: the Resource Groups Tagging API client answers
GetResources from a botocore ``Stubber`` with the resource that EC2 (moto) has already deleted, as the
real API does for a while after a deletion (its ResourceTagMappingList shape, API_GetResources.html, read
2026-11-24)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from test_aws_leftovers import aws as moto_aws  # noqa: F401 (moto, with placement groups)

moto = pytest.importorskip("moto")

from gpufleet.infra.aws.leftovers import find_leftovers  # noqa: E402
from gpufleet.infra.leftovers import settle  # noqa: E402
from gpufleet.infra.tags import AWS_CLUSTER_TAG  # noqa: E402

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


class LaggingTagging:
    """A boto3 session whose tagging client keeps listing ``stale`` ARNs; every other client is moto's."""

    def __init__(self, session: boto3.session.Session, cluster: str) -> None:
        self.session = session
        self.cluster = cluster
        self.stale: list[str] = []

    def client(self, service: str, **kwargs: Any) -> Any:
        client = self.session.client(service, **kwargs)
        if service != "resourcegroupstaggingapi":
            return client
        stubber = Stubber(client)
        tags = [{"Key": AWS_CLUSTER_TAG, "Value": self.cluster}]
        mappings = [{"ResourceARN": arn, "Tags": tags} for arn in self.stale]
        stubber.add_response("get_resources", {"ResourceTagMappingList": mappings, "PaginationToken": ""})
        stubber.activate()
        return client


def _gateway(session, cluster: str) -> str:
    ec2 = session.client("ec2")
    tags = [{"ResourceType": "internet-gateway", "Tags": [{"Key": AWS_CLUSTER_TAG, "Value": cluster}]}]
    return ec2.create_internet_gateway(TagSpecifications=tags)["InternetGateway"]["InternetGatewayId"]


def _poll(session: LaggingTagging, on_sleep=None):
    """``settle`` over the finder, on a fake clock; ``on_sleep`` is what the cloud does between polls."""
    clock = [0.0]

    def sleep(seconds: float) -> None:
        if on_sleep is not None:
            on_sleep()
        clock[0] += seconds

    read = lambda: find_leftovers("demo", REGION, session=session)  # noqa: E731
    return settle(read, clock=lambda: clock[0], sleep=sleep, interval_s=15)


def _arn(kind: str, resource_id: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/{resource_id}"


def test_a_deleted_resource_the_tagging_api_still_lists_is_no_leftover(moto_aws):  # noqa: F811 (a fixture)
    live = _gateway(moto_aws, "demo")
    gone = _gateway(moto_aws, "demo")
    moto_aws.client("ec2").delete_internet_gateway(InternetGatewayId=gone)
    session = LaggingTagging(moto_aws, "demo")
    session.stale = [_arn("internet-gateway", live), _arn("internet-gateway", gone)]
    found = find_leftovers("demo", REGION, session=session)
    assert [item.id for item in found] == [_arn("internet-gateway", live)], found


def test_a_type_with_no_describe_call_here_stays_a_leftover(moto_aws):  # noqa: F811 (a fixture)
    session = LaggingTagging(moto_aws, "demo")
    arn = f"arn:aws:elasticfilesystem:{REGION}:{ACCOUNT}:file-system/fs-0123456789abcdef0"
    session.stale = [arn]
    assert [item.id for item in find_leftovers("demo", REGION, session=session)] == [arn]


def test_a_gateway_deleted_between_two_polls_ends_the_check_clean(moto_aws):  # noqa: F811 (a fixture)
    """Poll 1: the gateway is still there (its Describe finds it). Between the polls EC2 finishes the
    deletion; poll 2: the tagging API still lists it, Describe says InvalidInternetGatewayID.NotFound."""
    gateway = _gateway(moto_aws, "demo")
    session = LaggingTagging(moto_aws, "demo")
    session.stale = [_arn("internet-gateway", gateway)]
    ec2 = moto_aws.client("ec2")
    settled = _poll(session, lambda: ec2.delete_internet_gateway(InternetGatewayId=gateway))
    assert settled.leftovers == [] and settled.reads == 2, settled


def test_a_gateway_still_there_is_reported_with_how_long(moto_aws):  # noqa: F811 (a fixture)
    gateway = _gateway(moto_aws, "demo")
    session = LaggingTagging(moto_aws, "demo")
    session.stale = [_arn("internet-gateway", gateway)]
    settled = _poll(session)
    assert [str(item) for item in settled.leftovers] == [
        f"tagged resource {_arn('internet-gateway', gateway)}: still listed after 15 s (2 read(s) in a row)"
    ], settled
