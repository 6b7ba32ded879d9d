"""Launch templates and instances: IMDSv2, encrypted gp3 root volumes, user data, images, names."""

from __future__ import annotations

import pytest
import yaml
from aws_specs import aws_spec

LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyForUnitTests0000000000 ci@test"


def test_every_launch_template_requires_imdsv2(plan_aws):
    recorded = plan_aws(aws_spec())
    for template in recorded.of_type(LT):
        meta = template.inputs["metadataOptions"]
        assert meta["httpTokens"] == "required", f"{template.urn}: {meta}"
        assert meta["httpEndpoint"] == "enabled", f"{template.urn}: {meta}"
        assert meta["httpPutResponseHopLimit"] == 2, f"{template.urn}: hop limit {meta}"


def test_root_volumes_are_encrypted_gp3_of_the_spec_size(plan_aws):
    recorded = plan_aws(aws_spec(gpu={"root_volume_gib": 750}))
    sizes = {"fleet-head-lt": 200, "fleet-gpu-lt": 750}
    for template in recorded.of_type(LT):
        (mapping,) = template.inputs["blockDeviceMappings"]
        ebs = mapping["ebs"]
        assert ebs["encrypted"] == "true", f"{template.urn}: {ebs}"
        assert ebs["volumeType"] == "gp3", f"{template.urn}: {ebs}"
        assert ebs["volumeSize"] == sizes[template.name], f"{template.urn}: {ebs}"
        assert mapping["deviceName"] == "/dev/sda1", f"{template.urn}: root device {mapping}"


def test_instances_use_their_group_template_and_spec_host_names(plan_aws):
    spec = aws_spec(gpu={"count": 3})
    recorded = plan_aws(spec)
    names = [r.name for r in recorded.of_type(INSTANCE)]
    assert names == ["fleet-head"], "the compute group launches as one fleet (test_fleet.py)"
    expected = [h for g in spec.node_groups for h in spec.host_names(g)]
    assert [host["name"] for host in recorded.outputs["hosts"]] == expected
    templates = {t.name: t for t in recorded.of_type(LT)}
    assert templates["fleet-gpu-lt"].inputs["instanceType"] == "p5.48xlarge"
    assert templates["fleet-head-lt"].inputs["instanceType"] == "m7i.xlarge"
    for instance in recorded.of_type(INSTANCE):
        assert "subnetId" not in instance.inputs, f"{instance.urn}: the launch template's interfaces carry it"
        assert instance.inputs["launchTemplate"]["id"].startswith("lt-"), instance.urn
        assert not instance.inputs.get("associatePublicIpAddress"), instance.urn


def test_user_data_only_prepares_for_ansible(plan_aws):
    recorded = plan_aws(aws_spec(access={"ssh_public_key": KEY}))
    for instance in recorded.of_type(INSTANCE):
        text = instance.inputs["userData"]
        assert text.startswith("#cloud-config\n"), f"{instance.urn}: {text[:40]!r}"
        config = yaml.safe_load(text)
        assert config == {
            "hostname": instance.name,
            "preserve_hostname": False,
            "manage_etc_hosts": True,
            "packages": ["python3"],
            "disable_root": True,  # no root SSH login (issue 10, AWS 4)
            "ssh_authorized_keys": [KEY],
        }, f"{instance.urn}: {config}"


@pytest.mark.parametrize(
    ("family", "gpu_name", "head_name"),
    [
        ("ubuntu-22.04", "ubuntu-jammy-22.04-amd64-server", "ubuntu-jammy-22.04-amd64-server"),
        ("ubuntu-24.04", "ubuntu-noble-24.04-amd64-server", "ubuntu-noble-24.04-amd64-server"),
        ("dlami-base-ubuntu-22.04", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)",
         "ubuntu-jammy-22.04-amd64-server"),
    ],
)  # fmt: skip
def test_images_by_family(plan_aws, family, gpu_name, head_name):
    from gpufleet.infra.aws.mocks import AwsMockCloud

    spec = aws_spec(provider={**aws_spec().provider.model_dump(), "ami": {"family": family}})
    recorded = plan_aws(spec)
    templates = {t.name: t for t in recorded.of_type(LT)}
    cloud = AwsMockCloud(spec)

    def image_named(fragment: str, owner: str) -> str:
        from gpufleet.catalog.aws import AMI_FAMILIES

        query = next(q for q in AMI_FAMILIES.values() if fragment in q.name_pattern)
        assert query.owner == owner
        return cloud.invoke("aws:ec2/getAmi:getAmi", {"owners": [owner], "filters": [
            {"name": "name", "values": [query.name_pattern]}]})["id"]  # fmt: skip

    gpu_owner = "amazon" if family.startswith("dlami") else "099720109477"
    assert templates["fleet-gpu-lt"].inputs["imageId"] == image_named(gpu_name, gpu_owner)
    assert templates["fleet-head-lt"].inputs["imageId"] == image_named(head_name, "099720109477")


def test_pinned_image_is_used_everywhere(plan_aws):
    provider = {**aws_spec().provider.model_dump(), "ami": {"id": "ami-0abc1234def567890"}}
    recorded = plan_aws(aws_spec(provider=provider))
    assert {t.inputs["imageId"] for t in recorded.of_type(LT)} == {"ami-0abc1234def567890"}


def test_instance_profile_carries_ssm(plan_aws):
    recorded = plan_aws(aws_spec())
    (attachment,) = recorded.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
    for template in recorded.of_type(LT):
        assert template.inputs["iamInstanceProfile"]["arn"].startswith("arn:aws:iam::"), template.urn
    provider = {**aws_spec().provider.model_dump(), "ssm": False}
    recorded = plan_aws(aws_spec(provider=provider))
    assert not recorded.of_type("aws:iam/role:Role")
    assert all("iamInstanceProfile" not in t.inputs for t in recorded.of_type(LT))


def test_arm64_type_boots_the_arm64_image_of_its_family(plan_aws, monkeypatch):
    """An arm64 compute type (Grace) boots the ARM64 DLAMI while the x86 head node keeps the amd64
    Ubuntu image: one getAmi per family and architecture, filtered on that architecture."""
    import gpufleet.infra.aws.component as component
    import gpufleet.infra.program as program_module
    from gpufleet.catalog import Catalog, load_catalog
    from gpufleet.infra.aws.mocks import AwsMockCloud

    real = load_catalog()
    arm = real.instance_types["p6-b300.48xlarge"].model_copy(
        update={"name": "arm64-test", "cpu_arch": "arm64"}
    )
    catalog = Catalog.model_construct(
        sources=real.sources, instance_types={**real.instance_types, "p6-b300.48xlarge": arm}
    )
    monkeypatch.setattr(component, "load_catalog", lambda: catalog)
    monkeypatch.setattr(program_module, "load_catalog", lambda: catalog)
    provider = {**aws_spec().provider.model_dump(), "ami": {"family": "dlami-base-ubuntu-22.04"}}
    spec = aws_spec(provider=provider, gpu={"instance_type": "p6-b300.48xlarge"})
    templates = {t.name: t for t in plan_aws(spec).of_type(LT)}
    cloud = AwsMockCloud(spec)

    def image(name: str, owner: str, arch: str) -> str:
        filters = [{"name": "name", "values": [name]}, {"name": "architecture", "values": [arch]}]
        return cloud.invoke("aws:ec2/getAmi:getAmi", {"owners": [owner], "filters": filters})["id"]

    arm_dlami = "Deep Learning ARM64 Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
    head = "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"
    assert templates["fleet-gpu-lt"].inputs["imageId"] == image(arm_dlami, "amazon", "arm64")
    assert templates["fleet-head-lt"].inputs["imageId"] == image(head, "099720109477", "x86_64")
