"""``pulumi up`` from stacks/ (CI) boots the baked image of the spec's roles and pins, as ``gpufleet up``
does.

stacks/__main__.py runs under Pulumi's mocks with each cloud's stack config. The mock cloud holds baked
images (an older and a newer one of the current hash, and one of other roles); the program finds the
newest of the current hash with the provider's own functions (``aws:ec2/getAmiIds``,
``gcp:compute/getImages``), every node boots it, the outputs record its hash, and the engine's log says
which image it is. No baked image, or ``gpufleet:useBakedImage: false``, boots the base image.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest
import yaml
from stacks_run import run_stack

from gpufleet.bake.baker import baked_and_current, spec_hash
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import Plan
from gpufleet.infra.stack_access import contract_outputs
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.spec.load import load_spec
from gpufleet.spec.model import ClusterSpec

STACKS = Path(__file__).resolve().parents[2] / "stacks"
AWS_STACK, GCP_STACK = "Pulumi.p5-fsx.yaml", "Pulumi.a3-mega-lustre.yaml"


def stack(name: str) -> tuple[dict[str, str], ClusterSpec]:
    config = yaml.safe_load((STACKS / name).read_text(encoding="utf-8"))["config"]
    return config, load_spec(STACKS / config["gpufleet:spec"])


def images(spec: ClusterSpec, prefix: str) -> list[CloudImage]:
    digest = spec_hash(spec)
    assert digest is not None
    return [
        CloudImage(id=f"{prefix}old", name="old", digest=digest, base="base", created="2026-11-01T10:00:00Z"),
        CloudImage(id=f"{prefix}new", name="new", digest=digest, base="base", created="2026-11-20T10:00:00Z"),
        CloudImage(
            id=f"{prefix}other", name="other", digest="0" * 64, base="base", created="2026-11-22T10:00:00Z"
        ),
    ]


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(pulumi.log, "info", lambda message, *args, **kwargs: lines.append(message))
    return lines


def aws_images(plan: Plan) -> set[str]:
    return {template.inputs["imageId"] for template in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")}


def gcp_images(plan: Plan) -> set[str]:
    return {
        vm.inputs["bootDisk"]["initializeParams"]["image"]
        for vm in plan.of_type("gcp:compute/instance:Instance")
    }


def test_aws_stack_boots_the_newest_baked_ami_of_the_current_roles(logged, monkeypatch):
    config, spec = stack(AWS_STACK)
    cloud = AwsMockCloud(spec)
    cloud.baked_images = images(spec, "ami-0baked")
    plan = run_stack(AWS_STACK, cloud, config, monkeypatch)
    assert aws_images(plan) == {"ami-0bakednew"}
    digest = spec_hash(spec)
    assert plan.outputs["baked_image_hash"] == digest
    inventory = from_stack_outputs(contract_outputs(plan.outputs))
    assert baked_and_current(spec, inventory.baked_image_hash) == digest
    said = [line for line in logged if "node image ami-0bakednew: baked 2026-11-20T10:00:00Z" in line]
    assert said, logged


def test_gcp_stack_boots_the_newest_baked_image_of_the_current_roles(logged, monkeypatch):
    config, spec = stack(GCP_STACK)
    cloud = GcpMockCloud(spec)
    cloud.baked_images = images(spec, "gpufleet-baked-")
    plan = run_stack(GCP_STACK, cloud, config, monkeypatch)
    wanted = f"projects/{spec.provider.project}/global/images/gpufleet-baked-new"
    assert gcp_images(plan) == {wanted}
    assert plan.outputs["baked_image_hash"] == spec_hash(spec)[:63]
    assert any("node image gpufleet-baked-new: baked" in line for line in logged), logged


CLOUDS = [(AWS_STACK, AwsMockCloud, "ami-0baked"), (GCP_STACK, GcpMockCloud, "gpufleet-baked-")]


@pytest.mark.parametrize(("name", "cloud_type", "prefix"), CLOUDS)
def test_no_current_baked_image_or_use_baked_image_false_boots_the_base_image(
    logged, monkeypatch, name, cloud_type, prefix
):
    config, spec = stack(name)
    read = aws_images if cloud_type is AwsMockCloud else gcp_images
    base = read(run_stack(name, cloud_type(spec), config, monkeypatch))
    assert not any(prefix in image for image in base), base
    assert any("no baked image for the current roles and pins" in line for line in logged), logged

    others = cloud_type(spec)
    others.baked_images = [image for image in images(spec, prefix) if image.digest != spec_hash(spec)]
    plan = run_stack(name, others, config, monkeypatch)
    assert read(plan) == base and plan.outputs["baked_image_hash"] is None

    opted_out = cloud_type(spec)
    opted_out.baked_images = images(spec, prefix)
    plan = run_stack(name, opted_out, {**config, "gpufleet:useBakedImage": "false"}, monkeypatch)
    assert read(plan) == base and plan.outputs["baked_image_hash"] is None
    assert from_stack_outputs(contract_outputs(plan.outputs)).baked_image_hash is None
