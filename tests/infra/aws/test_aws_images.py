"""Baked AMIs against moto: listed by their tags with their snapshots and users, deleted with their
snapshots, never while an instance runs from them, and the retention rule applied by ``reap``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest

moto = pytest.importorskip("moto")

from aws_specs import aws_spec  # noqa: E402

from gpufleet.errors import ProvisionError  # noqa: E402
from gpufleet.infra.aws import images  # noqa: E402
from gpufleet.infra.aws.backend import backend  # noqa: E402
from gpufleet.infra.tags import AWS_CLUSTER_TAG, aws_image_tags  # noqa: E402
from gpufleet.inventory.model import Connection, Host, Inventory  # noqa: E402
from gpufleet.lifecycle.images import prune  # noqa: E402
from gpufleet.spec.model import FabricKind  # noqa: E402

REGION = "us-east-1"
DAY = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def ec2(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # moto's hundreds of public AMIs: seconds each
    with moto.mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        yield client
        _UPSTREAM.pop(id(client), None)
        # moto rebuilds its backends as the mock ends, under the settings of that moment: other tests
        # expect the public AMIs back.
        monkeypatch.delenv("MOTO_EC2_LOAD_DEFAULT_AMIS")


_UPSTREAM: dict[int, str] = {}


def upstream(ec2) -> str:
    """The base image builders start from, registered once per test (moto's public AMIs are not loaded)."""
    if id(ec2) not in _UPSTREAM:
        _UPSTREAM[id(ec2)] = ec2.register_image(
            Name="ubuntu-jammy-22.04-amd64-server", RootDeviceName="/dev/sda1", Architecture="x86_64"
        )["ImageId"]
    return _UPSTREAM[id(ec2)]


def launch(ec2, image_id: str, cluster: str | None = None) -> str:
    tags = (
        [{"ResourceType": "instance", "Tags": [{"Key": AWS_CLUSTER_TAG, "Value": cluster}]}]
        if cluster
        else []
    )
    return ec2.run_instances(
        ImageId=image_id, MinCount=1, MaxCount=1, InstanceType="c6i.2xlarge", TagSpecifications=tags
    )["Instances"][0]["InstanceId"]


def bake(ec2, digest: str, *, days: int = 0, base: str = "ubuntu-22.04", tagged: bool = True) -> str:
    """An AMI made as the image step makes one: from a builder instance, with gpufleet's image tags."""
    builder = launch(ec2, upstream(ec2), "bake-builder")
    tags = aws_image_tags(aws_spec(), digest, base, DAY + timedelta(days=days)) if tagged else {"Name": "x"}
    image = ec2.create_image(
        InstanceId=builder,
        Name=f"gpufleet-baked-{digest[:12]}-{days}",
        TagSpecifications=[
            {"ResourceType": "image", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["ImageId"]
    ec2.terminate_instances(InstanceIds=[builder])
    return image


def test_list_finds_only_baked_amis_newest_first_with_snapshots_and_users(ec2):
    old = bake(ec2, "a" * 64, days=0)
    new = bake(ec2, "b" * 64, days=3)
    bake(ec2, "c" * 64, tagged=False)  # an AMI of the account that gpufleet did not bake
    launch(ec2, old, "train-1")
    found = images.list_images(REGION)
    assert [image.id for image in found] == [new, old], found
    assert found[1].digest == "a" * 64 and found[1].base == "ubuntu-22.04", found[1]
    assert found[1].created == "2026-11-01T09:00:00Z", found[1]
    assert found[1].used_by == ("train-1",) and found[0].used_by == (), found
    snapshots = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert found[1].snapshots and set(found[1].snapshots) <= snapshots, found[1].snapshots


def test_delete_is_refused_while_an_instance_runs_from_the_ami(ec2):
    image_id = bake(ec2, "a" * 64)
    launch(ec2, image_id, "train-1")
    (image,) = images.list_images(REGION)
    with pytest.raises(ProvisionError, match="in use by train-1"):
        images.delete_image(REGION, image)
    assert ec2.describe_images(ImageIds=[image_id])["Images"], "the AMI was deregistered anyway"


def test_delete_deregisters_the_ami_and_deletes_its_snapshots(ec2):
    image_id = bake(ec2, "a" * 64)
    (image,) = images.list_images(REGION)
    removed = images.delete_image(REGION, image)
    assert removed == [f"ami {image_id}"] + [f"ebs snapshot {s}" for s in image.snapshots], removed
    assert images.list_images(REGION) == []
    left = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert not left.intersection(image.snapshots), left.intersection(image.snapshots)


def write_state(root, cluster: str, digest: str) -> None:
    host = Host(
        name=f"{cluster}-0",
        roles=["controller", "login", "compute"],
        private_ip="10.0.0.5",
        address="10.0.0.5",
        instance_type="c6i.2xlarge",
        cpus=8,
        memory_mb=15000,
    )
    inventory = Inventory(
        cluster=cluster,
        provider="aws",
        fabric=FabricKind.EFA,
        hosts=[host],
        connection=Connection(),
        baked_image_hash=digest,
    )
    (root / cluster).mkdir(parents=True)
    inventory.write(root / cluster / "inventory.yml")


def test_reap_keeps_the_newest_two_per_base_and_any_ami_in_use_or_on_record(ec2, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    newest, second, running, recorded, unused = (
        bake(ec2, digest * 64, days=days)
        for digest, days in (("e", 5), ("d", 4), ("c", 3), ("b", 2), ("a", 1))
    )
    other_base = bake(ec2, "f" * 64, days=0, base="dlami-base-ubuntu-22.04")
    launch(ec2, running, "train-1")
    write_state(tmp_path, "train-2", "b" * 64)

    would = prune(backend.images, REGION, dry_run=True)
    assert [(item.image.id, item.action) for item in would] == [(unused, "would delete")], would
    assert {i.id for i in images.list_images(REGION)} == {
        newest,
        second,
        running,
        recorded,
        unused,
        other_base,
    }

    done = prune(backend.images, REGION)
    assert [(item.image.id, item.action) for item in done] == [(unused, "deleted")], done
    assert {i.id for i in images.list_images(REGION)} == {newest, second, running, recorded, other_base}


def template(ec2, name: str, image_id: str) -> str:
    return ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": image_id, "InstanceType": "p5.48xlarge"}
    )["LaunchTemplate"]["LaunchTemplateId"]


def test_an_ami_a_launch_template_or_a_live_fleet_names_is_in_use_and_never_pruned(
    ec2, tmp_path, monkeypatch
):
    """AWS audit N16: a template keeps its first image, so its next fleet (a replaced group, a lost node)
    needs the AMI after every instance from it is gone."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    newest, _second, named, by_fleet, unused = (
        bake(ec2, digest * 64, days=days)
        for digest, days in (("e", 5), ("d", 4), ("c", 3), ("b", 2), ("a", 1))
    )
    template(ec2, "train-1-gpu-lt", named)
    # A fleet naming version 1 of a template whose latest version has moved on to another image.
    fleet_lt = template(ec2, "train-2-gpu-lt", by_fleet)
    ec2.create_launch_template_version(
        LaunchTemplateId=fleet_lt, SourceVersion="1", LaunchTemplateData={"ImageId": newest}
    )
    ec2.modify_launch_template(LaunchTemplateId=fleet_lt, DefaultVersion="2")
    ec2.create_fleet(
        Type="maintain",
        LaunchTemplateConfigs=[
            {"LaunchTemplateSpecification": {"LaunchTemplateId": fleet_lt, "Version": "1"}}
        ],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
    )
    used = {image.id: image.used_by for image in images.list_images(REGION)}
    assert used[named] == ("launch template train-1-gpu-lt",), used
    assert any(user.startswith("ec2 fleet fleet-") for user in used[by_fleet]), used
    assert used[unused] == (), used

    with pytest.raises(ProvisionError, match="in use by launch template train-1-gpu-lt"):
        images.delete_image(REGION, next(i for i in images.list_images(REGION) if i.id == named))
    done = prune(backend.images, REGION)
    assert [(item.image.id, item.action) for item in done] == [(unused, "deleted")], done
