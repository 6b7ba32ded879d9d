"""The GCP image builder (``gpufleet image build``) and baked images in ``up``, under Pulumi's mocks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pulumi
import pytest
from gcp_testlib import CREATED_AT, gcp_spec

from gpufleet.bake import cloud as cloudbake
from gpufleet.bake.baker import baked_and_current, spec_hash
from gpufleet.errors import SpecError
from gpufleet.infra.gcp.backend import backend
from gpufleet.infra.gcp.compute import KEPT_BOOT_IMAGE
from gpufleet.infra.gcp.image_builder import GUEST_OS_FEATURES
from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.images import BakeRequest, CloudImage
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.infra.tags import GCP_CLUSTER_LABEL, GCP_EXPIRES_LABEL, GCP_IMAGE_HASH_LABEL
from gpufleet.inventory.stack import from_stack_outputs

INSTANCE = "gcp:compute/instance:Instance"
IMAGE = "gcp:compute/image:Image"
FIREWALL = "gcp:compute/firewall:Firewall"
CIDRS = ["203.0.113.0/24"]
DISK = (
    "https://www.googleapis.com/compute/v1/projects/test-project-1/zones/us-central1-a/disks/bake-x-builder"
)


def bake_spec(instance_type: str = "a3-megagpu-8g", **changes: Any):
    return gcp_spec(instance_type, access={"allowed_cidrs": CIDRS}, **changes)


def one(plan: Plan, type_: str):
    found = plan.of_type(type_)
    assert len(found) == 1, [r.urn for r in found]
    return found[0]


def recorded_options(request: BakeRequest) -> tuple[Plan, dict[str, pulumi.ResourceOptions]]:
    options: dict[str, pulumi.ResourceOptions] = {}

    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            options[args.name] = args.opts

        pulumi.runtime.register_stack_transformation(keep)
        return backend.images.builder_program(request)

    return run_offline(program, GcpMockCloud(request.spec), stack=request.name), options


def test_ssh_reaches_the_builder_from_the_allowed_cidrs_only():
    plan = cloudbake.CloudBaker(backend).preview(bake_spec(), CREATED_AT)
    firewalls = plan.of_type(FIREWALL)
    assert [f.inputs["sourceRanges"] for f in firewalls] == [CIDRS], [(f.urn, f.inputs) for f in firewalls]
    (rule,) = firewalls
    assert rule.inputs["direction"] == "INGRESS" and rule.inputs["allows"] == [
        {"protocol": "tcp", "ports": ["22"]}
    ]
    builder = one(plan, INSTANCE)
    assert rule.inputs["targetTags"] == builder.inputs["tags"], (rule.inputs, builder.inputs["tags"])
    labels = builder.inputs["labels"]
    assert labels[GCP_CLUSTER_LABEL].startswith("bake-") and labels[GCP_EXPIRES_LABEL] == "20261122t1230z", (
        labels
    )


def test_the_image_is_made_from_the_recorded_disk_of_the_stopped_builder_with_gpu_guest_features():
    request = replace(cloudbake.request_for(backend.images, bake_spec(), created_at=CREATED_AT), source=DISK)
    plan, options = recorded_options(request)
    image = one(plan, IMAGE)
    assert image.inputs["sourceDisk"] == DISK, image.inputs
    assert [f["type"] for f in image.inputs["guestOsFeatures"]] == list(GUEST_OS_FEATURES), image.inputs
    assert image.inputs["labels"][GCP_IMAGE_HASH_LABEL] == request.digest[:63], image.inputs["labels"]
    assert GCP_CLUSTER_LABEL not in image.inputs["labels"], image.inputs["labels"]
    assert one(plan, INSTANCE).inputs["desiredStatus"] == "TERMINATED", (
        "an image of a running VM's disk fails"
    )
    assert options[image.name].retain_on_delete is True


def test_a_cpu_builder_bakes_an_accelerator_image_on_its_own_disk_type():
    """The accelerator image carries the driver (gpu_stack verify): the install phase needs no GPU."""
    request = cloudbake.request_for(backend.images, bake_spec("a3-ultragpu-8g"), created_at=CREATED_AT)
    assert request.instance_type == backend.images.builder_cpu_type
    builder = one(cloudbake.CloudBaker(backend).preview(bake_spec("a3-ultragpu-8g"), CREATED_AT), INSTANCE)
    assert builder.inputs["bootDisk"]["initializeParams"]["type"] == "pd-balanced", builder.inputs["bootDisk"]


def test_no_allowed_cidrs_no_bake():
    with pytest.raises(SpecError, match="allowed_cidrs"):
        cloudbake.CloudBaker(backend).preview(gcp_spec(), CREATED_AT)


def cluster(spec, baked: CloudImage | None) -> tuple[Plan, dict[str, list[str]]]:
    ignored: dict[str, list[str]] = {}

    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            ignored[args.name] = list(args.opts.ignore_changes or [])

        pulumi.runtime.register_stack_transformation(keep)
        return backend.program(spec, CREATED_AT, (), baked)

    return run_offline(program, GcpMockCloud(spec), stack=spec.name), ignored


def test_up_boots_every_vm_from_the_baked_image_and_keeps_a_vms_first_image():
    spec = gcp_spec()
    baked = CloudImage(id="gpufleet-baked-abc", name="", digest=spec_hash(spec) or "", base="", created="")
    plan, ignored = cluster(spec, baked)
    vms = plan.of_type(INSTANCE)
    assert len(vms) == 3, [vm.urn for vm in vms]
    for vm in vms:
        image = vm.inputs["bootDisk"]["initializeParams"]["image"]
        assert image == "projects/test-project-1/global/images/gpufleet-baked-abc", (vm.urn, image)
        assert ignored[vm.name] == list(KEPT_BOOT_IMAGE), f"{vm.urn}: a newer image would replace it"
    inventory = from_stack_outputs(plan.outputs)
    assert baked_and_current(spec, inventory.baked_image_hash) == baked.digest == inventory.baked_image_hash
    plain, _ = cluster(spec, None)
    assert plain.outputs["baked_image_hash"] is None
