"""The AWS leftover finder and reaper against moto: tagged resources are found, and none once gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

moto = pytest.importorskip("moto")

from gpufleet.infra.aws.leftovers import IAM_PATH, find_expired, find_leftovers  # noqa: E402
from gpufleet.infra.tags import AWS_CLUSTER_ID_TAG, AWS_CLUSTER_TAG, AWS_EXPIRES_TAG  # noqa: E402

REGION = "us-east-1"


class PlacementGroups:
    """moto has no placement groups: answer EC2's three placement group calls from a dict instead.

    Hooked in as botocore handlers: ``before-parameter-build`` keeps the call's parameters in its
    context, ``before-call`` answers the call in place of the service.
    """

    def __init__(self) -> None:
        self.groups: dict[str, dict] = {}

    def register(self, session) -> None:
        for operation in ("CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup"):
            session.events.register(f"before-parameter-build.ec2.{operation}", self._keep)
            session.events.register(
                f"before-call.ec2.{operation}", self._answer(getattr(self, operation.lower()))
            )

    @staticmethod
    def _keep(params, context, **_):
        context["api_params"] = dict(params)

    @staticmethod
    def _answer(method):
        return lambda context, **_: method(context["api_params"])

    @staticmethod
    def _ok(body: dict):
        return type("Http", (), {"status_code": 200, "headers": {}})(), body

    def createplacementgroup(self, params):
        tags = [t for spec in params.get("TagSpecifications", []) for t in spec.get("Tags", [])]
        name = params["GroupName"]
        self.groups[name] = {
            "GroupName": name,
            "Strategy": params["Strategy"],
            "State": "available",
            "Tags": tags,
        }
        return self._ok({"PlacementGroup": self.groups[name]})

    def describeplacementgroups(self, params):
        wanted = {
            f["Name"][len("tag:") :]: set(f["Values"])
            for f in params.get("Filters", [])
            if f["Name"].startswith("tag:")
        }

        def match(group: dict) -> bool:
            tags = {t["Key"]: t["Value"] for t in group["Tags"]}
            return all(tags.get(key) in values for key, values in wanted.items())

        return self._ok({"PlacementGroups": [g for g in self.groups.values() if match(g)]})

    def deleteplacementgroup(self, params):
        self.groups.pop(params["GroupName"])
        return self._ok({})


@pytest.fixture
def aws(monkeypatch):
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with moto.mock_aws():
        session = boto3.session.Session(region_name=REGION)
        PlacementGroups().register(session)
        yield session


def _spec(kind: str, tags: dict[str, str]) -> list[dict]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def make_cluster(session, cluster: str, expires: datetime, cluster_id: str | None = None) -> dict[str, str]:
    """Everything gpufleet's program makes that carries the cluster tag, made the way EC2 would tag it
    (named after the id too, when given: two clusters of one name live side by side)."""
    named = f"{cluster}-{cluster_id}" if cluster_id else cluster
    tags = {AWS_CLUSTER_TAG: cluster, AWS_EXPIRES_TAG: expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if cluster_id:
        tags[AWS_CLUSTER_ID_TAG] = cluster_id
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=_spec("vpc", tags))["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(
        VpcId=vpc,
        CidrBlock="10.0.0.0/17",
        AvailabilityZone=f"{REGION}a",
        TagSpecifications=_spec("subnet", tags),
    )["Subnet"]["SubnetId"]
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.128.0/28", AvailabilityZone=f"{REGION}a")["Subnet"][
        "SubnetId"
    ]
    sg = ec2.create_security_group(
        GroupName=f"{named}-sg",
        Description="nodes",
        VpcId=vpc,
        TagSpecifications=_spec("security-group", tags),
    )["GroupId"]
    ec2.create_placement_group(
        GroupName=f"{named}-placement", Strategy="cluster", TagSpecifications=_spec("placement-group", tags)
    )
    eip = ec2.allocate_address(Domain="vpc", TagSpecifications=_spec("elastic-ip", tags))["AllocationId"]
    nat = ec2.create_nat_gateway(
        SubnetId=public, AllocationId=eip, TagSpecifications=_spec("natgateway", tags)
    )["NatGateway"]["NatGatewayId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(
        ImageId=image,
        InstanceType="m7i.xlarge",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        SecurityGroupIds=[sg],
        TagSpecifications=_spec("instance", tags),
    )["Instances"][0]["InstanceId"]
    volume = ec2.create_volume(
        AvailabilityZone=f"{REGION}a",
        Size=8,
        VolumeType="gp3",
        Encrypted=True,
        TagSpecifications=_spec("volume", tags),
    )["VolumeId"]
    eni = ec2.create_network_interface(
        SubnetId=subnet, Groups=[sg], TagSpecifications=_spec("network-interface", tags)
    )["NetworkInterface"]["NetworkInterfaceId"]
    fs = session.client("fsx").create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnet],
        SecurityGroupIds=[sg],
        LustreConfiguration={"DeploymentType": "SCRATCH_2"},
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )["FileSystem"]["FileSystemId"]
    iam = session.client("iam")
    role = f"{named}-node-role"
    iam.create_role(
        RoleName=role,
        Path=IAM_PATH,
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
    )
    bucket = f"{named}-scratch-bucket"
    s3 = session.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_tagging(
        Bucket=bucket, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]}
    )
    return {
        "bucket": f"arn:aws:s3:::{bucket}",
        "vpc": vpc, "subnet": subnet, "public": public, "sg": sg, "eip": eip, "nat": nat,
        "instance": instance, "volume": volume, "eni": eni, "fs": fs, "role": role,
        "placement": f"{named}-placement",
    }  # fmt: skip


def destroy(session, made: dict[str, str]) -> None:
    ec2 = session.client("ec2")
    ec2.terminate_instances(InstanceIds=[made["instance"]])
    ec2.delete_network_interface(NetworkInterfaceId=made["eni"])
    ec2.delete_volume(VolumeId=made["volume"])
    ec2.delete_nat_gateway(NatGatewayId=made["nat"])
    ec2.release_address(AllocationId=made["eip"])
    ec2.delete_placement_group(GroupName=made["placement"])
    session.client("fsx").delete_file_system(FileSystemId=made["fs"])
    session.client("iam").delete_role(RoleName=made["role"])
    ec2.delete_security_group(GroupId=made["sg"])
    ec2.delete_subnet(SubnetId=made["subnet"])
    ec2.delete_subnet(SubnetId=made["public"])
    ec2.delete_vpc(VpcId=made["vpc"])
    session.client("s3").delete_bucket(Bucket=made["bucket"].rsplit(":", 1)[1])


def test_finds_every_tagged_resource_of_the_cluster(aws):
    made = make_cluster(aws, "llm-p5", datetime.now(UTC) + timedelta(hours=1))
    other = make_cluster(aws, "other", datetime.now(UTC) + timedelta(hours=1))
    found = find_leftovers("llm-p5", REGION, session=aws)
    ids = {item.id for item in found}
    wanted = {
        made[k] for k in ("vpc", "subnet", "sg", "eip", "nat", "instance", "volume", "eni", "fs", "role")
    }
    wanted.add(made["placement"])
    wanted.add(made["bucket"])  # a type no describe call covers: found through the tagging API
    tagged = [f.id for f in found if f.kind == "tagged resource"]
    assert tagged == [made["bucket"]], f"the tagging API repeats what describe calls cover: {tagged}"
    assert wanted <= ids, f"missing: {sorted(wanted - ids)}; found: {[str(f) for f in found]}"
    assert not ids & {other["instance"], other["vpc"], other["fs"]}, [str(f) for f in found]
    assert made["public"] not in ids, "an untagged subnet was reported"


def test_finds_nothing_once_destroyed(aws):
    made = make_cluster(aws, "llm-p5", datetime.now(UTC) + timedelta(hours=1))
    destroy(aws, made)
    found = find_leftovers("llm-p5", REGION, session=aws)
    # moto keeps a NAT gateway in 'deleted' and an FSx file system as it deletes it at once; neither counts.
    assert found == [], [str(item) for item in found]


def test_terminated_instance_is_not_a_leftover_but_a_running_one_is(aws):
    made = make_cluster(aws, "llm-p5", datetime.now(UTC) + timedelta(hours=1))
    kinds = {item.id: item for item in find_leftovers("llm-p5", REGION, session=aws)}
    assert made["instance"] in kinds
    aws.client("ec2").terminate_instances(InstanceIds=[made["instance"]])
    kinds = {item.id: item for item in find_leftovers("llm-p5", REGION, session=aws)}
    assert made["instance"] not in kinds, str(kinds.get(made["instance"]))


def test_reaper_finds_only_expired_clusters(aws):
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    make_cluster(aws, "old", now - timedelta(hours=2))
    make_cluster(aws, "fresh", now + timedelta(hours=2))
    expired = find_expired(REGION, now=now, session=aws)
    assert [c.cluster for c in expired] == ["old"], expired
    assert expired[0].expires_at == now - timedelta(hours=2)
    assert expired[0].resources >= 5, expired[0]


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_raised_ttl_is_read_off_the_instances_not_the_volumes_tagged_at_launch(aws):
    """AWS audit 2026-11-27 H1, as its moto run reproduced it: the cluster's ttl is raised (24 h -> 48 h)
    on a live cluster; the next up rewrites the expiry of every resource the provider's default tags
    reach and of each instance, but a root volume and a network interface keep the first up's, which
    their launch template wrote (launch_template.KEPT). The reaper must not take the old one. Failed on
    main at bc3d77c (the earliest tag of any resource: expired at 21:00)."""
    first = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    raised = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    made = make_cluster(aws, "llm-p5", first)
    ec2 = aws.client("ec2")
    rewritten = [made[k] for k in ("vpc", "subnet", "sg", "eip", "nat", "instance")]
    ec2.create_tags(Resources=rewritten, Tags=[{"Key": AWS_EXPIRES_TAG, "Value": _stamp(raised)}])
    fsx = aws.client("fsx")
    arn = fsx.describe_file_systems(FileSystemIds=[made["fs"]])["FileSystems"][0]["ResourceARN"]
    fsx.tag_resource(ResourceARN=arn, Tags=[{"Key": AWS_EXPIRES_TAG, "Value": _stamp(raised)}])
    # volume and eni keep 21:00
    assert find_expired(REGION, now=first + timedelta(hours=1), session=aws) == []
    (late,) = find_expired(REGION, now=raised + timedelta(minutes=1), session=aws)
    assert (late.cluster, late.expires_at) == ("llm-p5", raised), late


def test_without_a_live_instance_the_latest_expiry_counts_never_the_earliest(aws):
    first = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)
    raised = first + timedelta(days=1)
    made = make_cluster(aws, "llm-p5", first)
    ec2 = aws.client("ec2")
    ec2.terminate_instances(InstanceIds=[made["instance"]])
    ec2.create_tags(
        Resources=[made["vpc"], made["sg"]], Tags=[{"Key": AWS_EXPIRES_TAG, "Value": _stamp(raised)}]
    )
    assert find_expired(REGION, now=first + timedelta(hours=1), session=aws) == []


def test_two_clusters_of_one_name_are_two_clusters(aws):
    """A cluster made again under the same name (the next dispatch of a CI stack, a workstation's up of
    the same spec) has another id: the reaper tells their expiries apart, and the leftover check of one
    never reports the other's resources (AWS audit 2026-11-27 M5)."""
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    old = make_cluster(aws, "llm-p5", now - timedelta(hours=2), cluster_id="aaaaaaaaaaaa")
    new = make_cluster(aws, "llm-p5", now + timedelta(hours=20), cluster_id="bbbbbbbbbbbb")
    (expired,) = find_expired(REGION, now=now, session=aws)
    assert (expired.cluster, expired.cluster_id) == ("llm-p5", "aaaaaaaaaaaa"), expired
    mine = {item.id for item in find_leftovers("llm-p5", REGION, session=aws, cluster_id="bbbbbbbbbbbb")}
    assert {new["instance"], new["vpc"], new["fs"], new["role"]} <= mine, mine
    assert not mine & {old["instance"], old["vpc"], old["fs"], old["role"], old["placement"]}, mine
    # without an id (a state made before ids) both are the cluster's, as before
    both = {item.id for item in find_leftovers("llm-p5", REGION, session=aws)}
    assert {old["instance"], new["instance"]} <= both
