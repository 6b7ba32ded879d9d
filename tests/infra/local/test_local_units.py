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


class _RecordingPodman:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def exists(self, kind: str, name: str) -> bool:
        return False

    def run(self, *args: str, **kwargs: object) -> str:
        self.calls.append(args)
        return ""


def test_a_baked_node_gets_its_facts_and_the_munge_key_read_only_and_the_key_is_not_in_the_facts(
    tmp_path: Path,
) -> None:
    from gpufleet.inventory.node_facts import FACTS_DIR, LOCAL_MUNGE_KEY, NodeFacts

    spec = load_spec(ROOT / "examples" / "local.yaml")
    state = ClusterState(name=spec.name, root=tmp_path)
    cluster = LocalCluster(spec, state, SilentReporter())
    podman = _RecordingPodman()
    cluster.podman = podman  # type: ignore[assignment]
    addresses = {node.name: f"10.0.0.{i + 2}" for i, node in enumerate(cluster.nodes)}
    folders = cluster._write_facts(addresses, "ab" * 32)
    assert sorted(folders) == sorted(addresses)
    key = state.ensure_munge_key().read_bytes()
    for node in cluster.nodes:
        text = (folders[node.name] / "node-facts.json").read_text()
        facts = NodeFacts.parse(text)
        assert facts.host == node.name and facts.baked_image_hash == "ab" * 32
        assert facts.munge_key.kind == "file" and facts.munge_key.path == LOCAL_MUNGE_KEY
        assert facts.cluster_vars["gpufleet_configure_on_node"] is True
        assert facts.cluster_vars["gpufleet_software"]["slurm"] == spec.software.slurm
        assert "ansible_ssh_private_key_file" not in facts.cluster_vars
        assert key.hex() not in text and str(state.private_key) not in text
    controller = NodeFacts.parse((folders["demo-controller"] / "node-facts.json").read_text())
    compute = NodeFacts.parse((folders["demo-compute-0"] / "node-facts.json").read_text())
    assert controller.controller_address is None
    assert compute.controller_address == addresses["demo-controller"]
    # The controller's play sees the compute nodes (slurm.conf's and gres.conf's inputs), by name only.
    assert [name for peer in controller.peers for name in peer.names()] == [
        "demo-compute-0",
        "demo-compute-1",
    ]
    assert compute.peers == controller.peers
    assert controller.peers[0].addresses == [addresses["demo-compute-0"], addresses["demo-compute-1"]]
    assert compute.shared_results == f"{spec.filesystem.mount_point}/.gpufleet/configure"
    authorized = tmp_path / "authorized_keys"
    cluster._ensure_node(
        cluster.nodes[1], "10.0.0.3", "img", authorized, "ab" * 32, folders["demo-compute-0"]
    )
    args = list(podman.calls[-1])
    mounts = [args[i + 1] for i, arg in enumerate(args) if arg == "-v"]
    assert f"{folders['demo-compute-0']}:{FACTS_DIR}:ro" in mounts
    assert f"{state.munge_key}:{LOCAL_MUNGE_KEY}:ro" in mounts


def test_a_login_refused_early_in_the_boot_is_tried_again_until_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sshd answered, then refused the first login ("Permission denied (publickey)", 0.4 s into a boot, in
    CI): the readiness check tries SSH again rather than failing up; a login refused until the deadline is
    the error, with SSH's words."""
    import socket
    import subprocess

    from gpufleet.infra.local import cluster as local

    spec = load_spec(ROOT / "examples" / "local.yaml")
    cluster = LocalCluster(spec, ClusterState(name=spec.name, root=tmp_path), SilentReporter())
    answers: list[subprocess.CompletedProcess[str]] = []

    class Open:
        def __enter__(self) -> Open:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Open())
    monkeypatch.setattr(local.time, "sleep", lambda s: None)
    calls: list[list[str]] = []

    def ssh(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return answers.pop(0)

    monkeypatch.setattr(local.subprocess, "run", ssh)
    refused = subprocess.CompletedProcess([], 255, "", "root@10.0.0.1: Permission denied (publickey).")
    answers += [refused, refused, subprocess.CompletedProcess([], 0, "running\n", "")]
    cluster._wait_ready("n1", "10.0.0.1", tmp_path / "key")
    assert len(calls) == 3

    clock = iter([0.0, 0.0, 1.0, 2.0, 200.0, 200.0, 200.0])
    monkeypatch.setattr(local.time, "monotonic", lambda: next(clock))
    answers[:] = [refused, refused]
    with pytest.raises(ProvisionError, match="Permission denied"):
        cluster._wait_ready("n1", "10.0.0.1", tmp_path / "key", timeout=90)
