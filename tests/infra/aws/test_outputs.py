"""Stack outputs: exactly ``gpufleet.infra.outputs``' shape, and what the inventory builds from them."""

from __future__ import annotations

import ipaddress

from aws_specs import aws_spec

from gpufleet.catalog import load_catalog
from gpufleet.infra.outputs import OUTPUT_KEYS, host_record
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.spec.model import Role

HOST_KEYS = set(host_record(name="x", roles=[Role.COMPUTE], private_ip="", instance_type="", item=None,
                            fabric_interfaces=0))  # fmt: skip


def test_outputs_have_the_common_shape(plan_aws):
    spec = aws_spec(gpu={"count": 4})
    outputs = plan_aws(spec).outputs
    assert tuple(outputs) == OUTPUT_KEYS, list(outputs)
    assert outputs["cluster"] == "fleet" and outputs["provider"] == "aws" and outputs["fabric"] == "efa"
    assert (outputs["region"], outputs["zone"]) == ("us-east-1", "us-east-1a")
    assert outputs["expires_at"] == "2026-11-23T09:00:00Z"
    assert outputs["head_node"] == "fleet-head"
    hosts = outputs["hosts"]
    assert [h["name"] for h in hosts] == [
        "fleet-head",
        "fleet-gpu-0",
        "fleet-gpu-1",
        "fleet-gpu-2",
        "fleet-gpu-3",
    ]
    p5 = load_catalog().get("p5.48xlarge")
    for host in hosts:
        assert set(host) == HOST_KEYS, host
        assert ipaddress.IPv4Address(host["private_ip"]) in ipaddress.IPv4Network("10.0.0.0/17"), host
        if host["name"] == "fleet-head":
            assert host["roles"] == ["controller", "login"] and host["fabric_interfaces"] == 0, host
        else:
            assert host["roles"] == ["compute"], host
            assert (host["instance_type"], host["gpus"], host["fabric_interfaces"]) == ("p5.48xlarge", 8, 32)
            assert host["cpus"] == p5.cpus, host
    assert len({h["private_ip"] for h in hosts}) == len(hosts), "private IPs repeat"


def test_outputs_build_the_inventory(plan_aws):
    outputs = plan_aws(aws_spec()).outputs
    inventory = from_stack_outputs(outputs)
    assert inventory.controller.name == outputs["head_node"]
    assert inventory.login.name == "fleet-head"
    assert [h.fabric_interfaces for h in inventory.compute] == [32, 32]
    groups = inventory.to_ansible()["all"]["children"]
    assert set(groups["compute"]["hosts"]) == {"fleet-gpu-0", "fleet-gpu-1"}


def test_login_group_serves_login(plan_aws):
    login = {"name": "login", "roles": ["login"], "instance_type": "m7i.xlarge"}
    data = aws_spec().model_dump(mode="json")
    data["node_groups"][0]["roles"] = ["controller"]
    data["node_groups"].insert(1, login)
    from gpufleet.spec import ClusterSpec

    outputs = plan_aws(ClusterSpec.model_validate(data)).outputs
    roles = {h["name"]: h["roles"] for h in outputs["hosts"]}
    assert roles["fleet-head"] == ["controller"] and roles["fleet-login"] == ["login"], roles
    assert outputs["head_node"] == "fleet-head"


def test_gpu_facts_and_stack_mode_follow_catalog_and_image(plan_aws):
    """A DLAMI carries the driver, CUDA and NCCL: its GPU hosts are verified; plain Ubuntu gets install."""
    provider = {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"}
    for family, mode in (("ubuntu-22.04", "install"), ("dlami-base-ubuntu-24.04", "verify")):
        spec = aws_spec(provider={**provider, "ami": {"family": family}})
        inventory = from_stack_outputs(plan_aws(spec).outputs)
        facts = {h.name: (h.gpu_arch, h.nvswitch, h.gpu_stack) for h in inventory.hosts}
        assert facts == {
            "fleet-head": (None, False, "none"),
            "fleet-gpu-0": ("sm_90", True, mode),
            "fleet-gpu-1": ("sm_90", True, mode),
        }, (family, facts)
    g5 = from_stack_outputs(
        plan_aws(
            aws_spec(gpu={"instance_type": "g5.48xlarge"}),
        ).outputs
    )
    assert [(h.gpu_arch, h.nvswitch) for h in g5.compute] == [("sm_86", False)] * 2


def test_gpu_components_follow_the_image_manifest(plan_aws):
    """The p5's x86_64 DLAMI: its driver is verified (the AMI's name), and what no x86_64 release page settles
    (CUDA, NCCL, DCGM) is detected on the node, never asserted from the ARM64 pages (issue 31, item 5); plain
    Ubuntu installs every component. The head node gets none."""
    provider = {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"}
    roles = ("cuda", "nccl", "dcgm")
    for family, driver, mode in (
        ("ubuntu-24.04", "install", "install"),
        ("dlami-base-ubuntu-24.04", "verify", "detect"),
    ):
        spec = aws_spec(provider={**provider, "ami": {"family": family}})
        outputs = plan_aws(spec).outputs
        inventory = from_stack_outputs(outputs)
        for host in inventory.compute:
            assert host.gpu_components["driver"] == driver, (family, host.gpu_components)
            assert {host.gpu_components[c] for c in roles} == {mode}, (family, host.gpu_components)
        assert inventory.controller.gpu_components == {} and inventory.controller.gpu_paths == {}
        written = inventory.to_ansible()["all"]["children"]["compute"]["hosts"]["fleet-gpu-0"]
        assert written["gpufleet_gpu_components"]["nccl"] == mode, written
        assert written["gpufleet_gpu_paths"] == {}, written  # no path is asserted for the x86_64 DLAMI
        if family.startswith("dlami"):
            assert written["gpufleet_gpu_components"]["gdrcopy"] == "verify"  # 2.6, its x86_64 page
            assert written["gpufleet_gpu_components"]["persistence_mode"] == "install"
