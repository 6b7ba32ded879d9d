"""The AWS image builder stack (``gpufleet image build``) under Pulumi's mocks: what the builder is
allowed, what the AMI is made from and tagged with, and that the AMI does not follow the builder."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pulumi
import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.bake import baker
from gpufleet.bake import cloud as cloudbake
from gpufleet.errors import SpecError
from gpufleet.infra import images
from gpufleet.infra.aws.backend import backend
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.infra.tags import AWS_CLUSTER_TAG, AWS_EXPIRES_TAG, AWS_IMAGE_HASH_TAG

INSTANCE = "aws:ec2/instance:Instance"
AMI = "aws:ec2/amiFromInstance:AmiFromInstance"
PROVIDER = "pulumi:providers:aws"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
CIDRS = ["203.0.113.0/24", "198.51.100.7/32"]
DLAMI = {
    "kind": "aws",
    "region": "us-east-1",
    "zone": "us-east-1a",
    "ami": {"family": "dlami-base-ubuntu-22.04"},
}


def bake_spec(**changes: Any):
    return aws_spec(**{"access": {"allowed_cidrs": CIDRS}, **changes})


def one(plan: Plan, type_: str, name: str | None = None):
    found = [r for r in plan.of_type(type_) if name is None or r.name == name]
    assert len(found) == 1, f"expected one {type_} {name or ''}; plan has {[r.urn for r in found]}"
    return found[0]


class Options:
    """Records each resource's options (mocks see inputs only) through a stack transformation."""

    def __init__(self) -> None:
        self.of: dict[str, pulumi.ResourceOptions] = {}

    def run(self, request: images.BakeRequest, cloud: AwsMockCloud | None = None) -> Plan:
        def program() -> Any:
            def keep(args: pulumi.ResourceTransformationArgs) -> None:
                self.of[args.name] = args.opts

            pulumi.runtime.register_stack_transformation(keep)
            return backend.images.builder_program(request)

        return run_offline(program, cloud or AwsMockCloud(request.spec), stack=request.name)


def request(spec=None, **changes: Any) -> images.BakeRequest:
    made = cloudbake.request_for(backend.images, spec or bake_spec(), created_at=CREATED_AT)
    return replace(
        made, ssh_keys=("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBuilderKeyForTests gpufleet",), **changes
    )


def test_the_builder_is_reachable_only_from_the_allowed_cidrs_with_imdsv2_and_an_encrypted_disk():
    plan = cloudbake.CloudBaker(backend).preview(bake_spec(), CREATED_AT)
    builder = one(plan, INSTANCE)
    assert builder.inputs["metadataOptions"]["httpTokens"] == "required", builder.urn
    assert builder.inputs["rootBlockDevice"]["encrypted"] is True, builder.urn
    assert builder.inputs["rootBlockDevice"]["volumeType"] == "gp3", builder.urn
    assert builder.inputs["associatePublicIpAddress"] is True, builder.urn
    assert "ssh_authorized_keys" in builder.inputs["userData"], builder.urn
    ingress = plan.of_type(INGRESS)
    assert sorted(rule.inputs["cidrIpv4"] for rule in ingress) == sorted(CIDRS), [r.urn for r in ingress]
    assert all((r.inputs["fromPort"], r.inputs["toPort"]) == (22, 22) for r in ingress), ingress
    egress = {(rule.inputs["fromPort"], rule.inputs["cidrIpv4"]) for rule in plan.of_type(EGRESS)}
    assert egress == {(443, "0.0.0.0/0"), (80, "0.0.0.0/0")}, egress
    assert not plan.of_type("aws:ec2/natGateway:NatGateway"), "a builder needs no NAT gateway"


def test_the_builder_is_tagged_as_a_short_lived_cluster_and_the_ami_is_not():
    plan = cloudbake.CloudBaker(backend).preview(bake_spec(), CREATED_AT)
    made = request()
    cluster_provider = one(plan, PROVIDER, f"{made.name}-provider")
    default_tags = cluster_provider.inputs["defaultTags"]  # providers' object inputs arrive as JSON
    default_tags = (json.loads(default_tags) if isinstance(default_tags, str) else default_tags)["tags"]
    assert default_tags[AWS_CLUSTER_TAG] == made.name and default_tags["team"] == "ml", default_tags
    assert default_tags[AWS_EXPIRES_TAG] == "2026-11-22T12:00:00Z", default_tags  # three hours on
    image_provider = one(plan, PROVIDER, f"{made.name}-image-provider")
    assert "defaultTags" not in image_provider.inputs, image_provider.inputs
    tags = one(plan, AMI).inputs["tags"]
    assert tags[AWS_IMAGE_HASH_TAG] == made.digest and tags["gpufleet:image"] == "baked", tags
    assert tags["gpufleet:image-base"] == "ubuntu-22.04" and tags["team"] == "ml", tags
    assert AWS_CLUSTER_TAG not in tags and AWS_EXPIRES_TAG not in tags, tags


def test_the_image_step_makes_the_ami_from_the_recorded_instance_id_and_keeps_it_on_delete():
    options = Options()
    made = request(source="i-0123456789abcdef0")
    plan = options.run(made)
    ami = one(plan, AMI)
    assert ami.inputs["sourceInstanceId"] == "i-0123456789abcdef0", ami.inputs
    assert ami.inputs["name"] == f"gpufleet-baked-{made.digest[:12]}-202611220900", ami.inputs
    assert options.of[ami.name].retain_on_delete is True, "destroying the builder stack would delete the AMI"
    assert not options.of[ami.name].depends_on, "the AMI must not depend on the builder"
    assert plan.outputs["image_id"].startswith("ami-"), plan.outputs


def test_without_the_image_step_there_is_no_ami():
    plan = Options().run(request())
    assert not plan.of_type(AMI)
    assert plan.outputs["image_id"] is None and plan.outputs["public_ip"], plan.outputs


class LaterCloud(AwsMockCloud):
    """The same account on another run: every builder gets other ids and addresses."""

    def _instance(self, name: str, inputs: Any, rid: str) -> dict[str, Any]:
        return {**super()._instance(name, inputs, rid), "privateIp": "10.0.0.99", "publicIp": "192.0.2.99"}


def test_the_ami_inputs_do_not_follow_the_builder():
    """What the engine compares for the AMI is the same however the builder changes or goes: its only
    link to the builder is the id recorded as a plain string."""
    made = request(source="i-0123456789abcdef0")
    first = one(Options().run(made), AMI)
    later = one(Options().run(made, LaterCloud(made.spec)), AMI)
    assert first.inputs == later.inputs, (first.inputs, later.inputs)


def test_a_gpu_image_installing_the_driver_bakes_on_the_gpu_type_else_on_a_cpu_type():
    """nvidia_driver's install phase loads the module and starts nvidia-persistenced (its reboot.yml):
    that needs the GPU. A DLAMI carries the driver (gpu_stack verify): a CPU builder does."""
    assert request().instance_type == "p5.48xlarge"
    assert request(bake_spec(provider=DLAMI)).instance_type == backend.images.builder_cpu_type


def test_a_bake_without_allowed_cidrs_is_refused_before_anything_is_registered(recorded):
    with pytest.raises(SpecError, match="allowed_cidrs"):
        cloudbake.CloudBaker(backend).preview(aws_spec(), CREATED_AT)
    assert recorded() == []


def test_the_hash_follows_the_pins_and_not_the_cluster_size():
    base = baker.spec_hash(bake_spec())
    assert baker.spec_hash(bake_spec(name="other", gpu={"count": 8})) == base
    assert baker.spec_hash(bake_spec(software={"nccl": "2.28.3"})) != base
    assert baker.spec_hash(bake_spec(provider=DLAMI)) != base
    assert baker.spec_hash(bake_spec(software={"efa_installer": "1.42.0"})) != base


def test_gpu_groups_that_install_different_software_are_not_baked_into_one_image():
    """p5 (NVSwitch: fabric manager) beside g5 (no NVSwitch, no EFA at this size): one image cannot
    serve both, so the bake is refused and up boots the base image."""
    from gpufleet.progress import SilentReporter

    groups = [
        *aws_spec().model_dump(mode="json")["node_groups"],
        {"name": "small", "roles": ["compute"], "instance_type": "g5.xlarge", "count": 1},
    ]
    spec = bake_spec(node_groups=groups, fabric="efa")
    assert images.mixed_gpu_groups(backend.images, spec) == ["small"]
    with pytest.raises(SpecError, match="small install other GPU software than gpu"):
        cloudbake.request_for(backend.images, spec)

    class NoLookups(type(backend.images)):  # type: ignore[misc]
        def list_images(self, scope: str) -> list:
            raise AssertionError("a mixed cluster looks no image up")

    class Cloud(type(backend)):  # type: ignore[misc]
        images = NoLookups()

    assert cloudbake.CloudBaker(Cloud()).newest(spec, SilentReporter()) is None


def test_groups_on_two_cpu_architectures_are_not_baked_into_one_image(monkeypatch):
    """An arm64 GPU type (Grace) beside the x86 head node: an AMI boots on one architecture, so the bake
    is refused, naming each architecture's groups, before anything is registered."""
    from gpufleet.catalog import Catalog, load_catalog

    real = load_catalog()
    arm = real.instance_types["p6-b300.48xlarge"].model_copy(
        update={"name": "arm64-test", "cpu_arch": "arm64"}
    )
    catalog = Catalog.model_construct(
        sources=real.sources, instance_types={**real.instance_types, "p6-b300.48xlarge": arm}
    )
    monkeypatch.setattr(images, "load_catalog", lambda: catalog)
    spec = bake_spec(gpu={"instance_type": "p6-b300.48xlarge"})
    arches = images.cpu_architectures(spec)
    assert sorted(arches) == ["arm64", "x86_64"]
    with pytest.raises(SpecError, match=r"arm64 \(gpu\) and x86_64 \(.+\): one baked image boots on one CPU"):
        cloudbake.request_for(backend.images, spec, created_at=CREATED_AT)
    assert images.cpu_architectures(bake_spec()) == {"x86_64": [g.name for g in bake_spec().node_groups]}
