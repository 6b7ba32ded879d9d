"""Pieces of the local backend that need no container: names, the image tag, podman's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.errors import ProvisionError
from gpufleet.infra.local.cluster import LocalCluster, device_args, plan_nodes
from gpufleet.infra.local.image import node_image_ref
from gpufleet.infra.local.podman import containers_conf
from gpufleet.progress import SilentReporter
from gpufleet.spec import load_spec, parse_spec
from gpufleet.spec.model import Role
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[3]


def test_nodes_follow_the_spec() -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    nodes = plan_nodes(spec)
    assert [n.name for n in nodes] == ["demo-controller", "demo-compute-0", "demo-compute-1"]
    assert nodes[0].roles == (Role.CONTROLLER, Role.LOGIN)


def test_five_node_cluster_names() -> None:
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["node_groups"][1]["count"] = 4
    nodes = plan_nodes(parse_spec(yaml.safe_dump(data)))
    assert len(nodes) == 5 and nodes[-1].name == "demo-compute-3"


def test_image_tag_changes_with_its_inputs() -> None:
    one = node_image_ref("bookworm", "http://deb.debian.org/debian")
    assert one == node_image_ref("bookworm", "http://deb.debian.org/debian")
    assert one != node_image_ref("bookworm", "http://mirror.example/debian")
    assert one.startswith("localhost/gpufleet-node:bookworm-")


def test_containers_conf_settles_the_host_quirks() -> None:
    text = containers_conf()
    assert 'runtime = "runc"' in text
    assert 'cgroup_manager = "cgroupfs"' in text
    assert 'network_backend = "netavark"' in text
    assert "nofile=" in text and "nproc=" in text


def test_nodes_get_fuse_when_the_spec_installs_containers(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    assert spec.software.containers  # on by default
    assert device_args(spec) == ["--device", "/dev/fuse"]
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["software"]["containers"] = False
    assert device_args(parse_spec(yaml.safe_dump(data))) == []


def test_a_host_without_fuse_is_refused_with_the_fix(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    with pytest.raises(ProvisionError, match="modprobe fuse") as caught:
        device_args(spec, fuse=tmp_path / "fuse")
    assert "software.containers: false" in (caught.value.hint or "")


def test_the_inventory_says_every_node_is_a_container(tmp_path: Path) -> None:
    """The roles read gpufleet_node_is_container (enroot's cgroup hook, the stand-in GPU exporter), not the
    provider's name: the local backend is the one that sets it."""
    spec = load_spec(ROOT / "examples" / "local.yaml")
    cluster = LocalCluster(spec, ClusterState(name=spec.name, root=tmp_path), SilentReporter())
    addresses = {node.name: f"10.0.0.{i + 2}" for i, node in enumerate(cluster.nodes)}
    assert cluster.inventory(addresses).to_ansible()["all"]["vars"]["gpufleet_node_is_container"] is True
