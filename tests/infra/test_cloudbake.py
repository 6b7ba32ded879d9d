"""The bake driver's order of steps with the Pulumi and Ansible runs replaced: builder up, install phase,
image step from the recorded id, builder destroyed; on any failure the builder is destroyed too, and an
image already there for the hash is reused without a builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.bake import baker
from gpufleet.bake import cloud as cloudbake
from gpufleet.bake.cloud import CloudBaker
from gpufleet.errors import ConfigureError, LeftoversError
from gpufleet.infra import images
from gpufleet.infra.aws.images import AwsImages
from gpufleet.inventory.model import Inventory
from gpufleet.progress import SilentReporter
from gpufleet.spec import ClusterSpec
from gpufleet.state import ClusterState

SPEC = {
    "name": "fleet",
    "provider": {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
    ],
    "fabric": "efa",
    "access": {"allowed_cidrs": ["203.0.113.0/24"]},
}


class Workspace:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def remove_stack(self, name: str) -> None:
        self.log.append(f"remove {name}")


class Stack:
    def __init__(self, log: list[str]) -> None:
        self.workspace = Workspace(log)


class FakeImages:
    """A ``BakeSource``: AWS's own facts about a bake (its base image, its builder host), the builder program
    and the image listing recorded here; the AMI appears once the image step ran."""

    def __init__(self) -> None:
        self.facts = AwsImages()
        self.builder_cpu_type = self.facts.builder_cpu_type
        self.made: list[images.CloudImage] = []
        self.requests: list[images.BakeRequest] = []

    def bake_base(self, spec: ClusterSpec) -> str:
        return self.facts.bake_base(spec)

    def bake_host(self, spec: ClusterSpec, group) -> dict[str, Any]:
        return self.facts.bake_host(spec, group)

    def builder_program(self, request: images.BakeRequest) -> dict[str, Any]:
        self.requests.append(request)
        return {}

    def image_source(self, outputs: dict[str, Any]) -> str:
        return str(outputs["instance_id"])

    def image_scope(self, spec: ClusterSpec) -> str:
        return "us-east-1"

    def baked_by_invoke(self, spec: ClusterSpec, digest: str) -> images.CloudImage | None:
        raise AssertionError("a bake runs no Pulumi program of the cluster")

    def list_images(self, scope: str) -> list[images.CloudImage]:
        return list(self.made)

    def delete_image(self, scope: str, image: images.CloudImage) -> list[str]:
        raise AssertionError("a bake deletes no image")


class FakeCloud:
    """The stack driver a bake runs through (``cloudbake.StackDriver``): records what the bake asks."""

    def __init__(self, left: list[str] | None = None) -> None:
        self.log: list[str] = []
        self.left = left or []
        self.images = FakeImages()

    def check_credentials(self, spec: ClusterSpec) -> None:
        self.log.append("credentials")

    def mock_cloud(self, spec: ClusterSpec) -> Any:
        raise AssertionError("a bake runs no offline plan")

    def deploy(self, spec, state, reporter, program=None, baked=None) -> dict[str, Any]:
        assert program is not None, "the bake must run the builder's program, not the cluster's"
        program(None, ())  # registers nothing here: builder_program above only records its request
        step = self.images.requests[-1]
        self.log.append(f"up {spec.name} source={step.source}")
        if step.source is not None:
            self.images.made.append(
                images.CloudImage("ami-0new", "n", step.digest, step.base, "2026-11-23T00:00:00Z")
            )
        return {"instance_id": "i-0builder", "public_ip": "198.51.100.10", "private_ip": "10.0.0.7"}

    def destroy_stack(self, spec, state, reporter, program=None) -> list[str]:
        self.log.append(f"destroy {spec.name}")
        return []

    def leftovers(self, spec, state, reporter) -> list[str]:
        return self.left

    def select_stack(self, spec, state, program=None, baked=None):
        return Stack(self.log)


@pytest.fixture
def cloud(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr("gpufleet.infra.pulumi_stack.pulumi_cli", lambda: Path("/usr/bin/pulumi"))
    fake = FakeCloud()
    monkeypatch.setattr(
        cloudbake,
        "_install_phase",
        lambda request, state, made, reporter: fake.log.append(f"install on {made['public_ip']}"),
    )
    return fake


def spec() -> ClusterSpec:
    return ClusterSpec.model_validate(SPEC)


def test_a_bake_runs_builder_install_image_and_removes_the_builder(cloud):
    result = CloudBaker(cloud).build(spec(), SilentReporter())
    name = f"bake-{(baker.spec_hash(spec()) or '')[:8]}"
    assert result.built and result.image.id == "ami-0new"
    assert cloud.log == [
        "credentials",
        f"up {name} source=None",
        "install on 198.51.100.10",
        f"up {name} source=i-0builder",
        f"destroy {name}",
        f"remove {name}",
    ], cloud.log


def test_an_existing_image_of_the_hash_is_reused_without_a_builder(cloud):
    digest = baker.spec_hash(spec()) or ""
    cloud.images.made.append(
        images.CloudImage("ami-0old", "o", digest, "ubuntu-22.04", "2026-11-20T00:00:00Z")
    )
    result = CloudBaker(cloud).build(spec(), SilentReporter())
    assert not result.built and result.image.id == "ami-0old"
    assert cloud.log == ["credentials"], cloud.log


def test_a_failed_install_phase_destroys_the_builder_and_says_why(cloud, monkeypatch):
    def fail(request, state, made, reporter):
        raise ConfigureError("bake.yml failed on bake-x-builder")

    monkeypatch.setattr(cloudbake, "_install_phase", fail)
    with pytest.raises(ConfigureError, match=r"bake\.yml failed"):
        CloudBaker(cloud).build(spec(), SilentReporter())
    assert cloud.log[-2].startswith("destroy bake-") and cloud.log[-1].startswith("remove bake-"), cloud.log
    assert not any("source=i-0builder" in line for line in cloud.log), "no image from a failed bake"


def test_a_builder_that_cannot_be_removed_is_named(cloud):
    cloud.left = ["ec2 instance i-0builder (running)"]
    with pytest.raises(LeftoversError, match="i-0builder"):
        CloudBaker(cloud).build(spec(), SilentReporter())


def test_the_install_phase_runs_bake_yml_on_the_builder_in_every_group(monkeypatch, tmp_path):
    """The inventory the builder gets: one host in every group, reached at its public address with the
    builder's key, the GPU group's facts from the catalog, and leave to reboot for a new driver."""
    calls: list[tuple[str, Path, str | None]] = []
    extra: list[dict[str, str]] = []
    probed: list[tuple[str, str, float]] = []

    def run_playbook(playbook, inventory, artifacts, reporter, *, tags=None, extravars=None, **_):
        calls.append((playbook, inventory, tags))
        extra.append(extravars)

    def bake_vars(inventory, digest, reporter, *, wait_s=0):
        # The builder's python3 is probed over its SSH (configure.node_site; tests/configure cover it).
        probed.append((inventory.controller.address, digest, wait_s))
        return {"boot_configure_site_archive": "/cache/site.tar.gz", "boot_configure_image_hash": digest}

    monkeypatch.setattr("gpufleet.configure.runner.run_playbook", run_playbook)
    monkeypatch.setattr("gpufleet.configure.node_site.bake_vars", bake_vars)
    request = cloudbake.request_for(AwsImages(), spec())
    state = ClusterState(name=request.name, root=tmp_path / request.name)
    state.ensure_ssh_key()
    made = {"instance_id": "i-0builder", "public_ip": "198.51.100.10", "private_ip": "10.0.0.7"}
    cloudbake._install_phase(request, state, made, SilentReporter())
    assert calls == [("bake.yml", state.inventory_file, "install")], calls
    # The site the nodes configure themselves from, built for the builder's python3 (roles/boot_configure).
    assert probed == [("198.51.100.10", request.digest, 900)]
    assert extra == [
        {"boot_configure_site_archive": "/cache/site.tar.gz", "boot_configure_image_hash": request.digest}
    ]
    inventory = Inventory.read(state.inventory_file)
    (host,) = inventory.hosts
    assert host.address == "198.51.100.10" and host.name == f"{request.name}-builder", host
    assert sorted(role.value for role in host.roles) == ["compute", "controller", "login"], host.roles
    assert (host.gpus, host.gpu_stack, host.fabric_interfaces) == (8, "install", 32), host
    assert inventory.connection.private_key_file == str(state.private_key), inventory.connection
    assert inventory.extra_vars["nvidia_driver_reboot_allowed"] is True, inventory.extra_vars


def test_a_failed_bake_whose_builder_cannot_be_removed_says_both(cloud, monkeypatch):
    def fail(request, state, made, reporter):
        raise ConfigureError("bake.yml failed on bake-x-builder")

    monkeypatch.setattr(cloudbake, "_install_phase", fail)
    cloud.left = ["ec2 instance i-0builder (running)"]
    with pytest.raises(ConfigureError) as raised:
        CloudBaker(cloud).build(spec(), SilentReporter())
    assert "bake.yml failed" in raised.value.message and "i-0builder" in raised.value.message, raised.value


def test_the_bake_pins_carry_the_base_image_manifests_decision():
    """What the install phase installs per component is part of the image's hash: on the x86_64 DLAMI the
    driver is verified and what its x86_64 page does not settle is detected on the builder, on plain Ubuntu
    every component is installed; the two bakes differ."""
    plain = images.bake_pins(AwsImages(), spec())["builder"]
    dlami_data = {**SPEC, "provider": {**SPEC["provider"], "ami": {"family": "dlami-base-ubuntu-24.04"}}}
    dlami = images.bake_pins(AwsImages(), ClusterSpec.model_validate(dlami_data))["builder"]
    roles = ("driver", "cuda", "nccl", "dcgm")
    assert {plain["gpu_components"][c] for c in roles} == {"install"}, plain
    assert dlami["gpu_components"]["driver"] == "verify", dlami
    assert {dlami["gpu_components"][c] for c in roles[1:]} == {"detect"}, dlami
    assert dlami["gpu_paths"] == {}, dlami
    assert plain != dlami
