"""Bring a local cluster up and take it down: podman containers with systemd as PID 1.

``up`` creates, for cluster ``<name>``: a bridge network ``gpufleet-<name>`` with fixed node IPs, a volume
``gpufleet-<name>-shared`` when the spec's filesystem is ``volume``, and one container per node named after
its host name (``<name>-controller``, ``<name>-compute-0``, ...), all labelled ``gpufleet.cluster=<name>``.
Nodes run sshd with the cluster's own key; Ansible reaches them over SSH as it would a cloud or bare-metal
node. ``up`` is re-runnable: what exists and runs is kept. ``down`` removes by label, so it also cleans up
after a half-made cluster, then checks that nothing labelled is left; it never removes an image (images
are a cache that other clusters share).

Nodes start from the baked image the pipeline chose (``LocalBaker.newest``: the one of the spec's roles and
pins, when podman has it; ``gpufleet.infra.local.bake``), else from the plain node image. Each node made
from a baked image carries its hash as a label; the inventory
records ``gpufleet_baked_image_hash`` only when every node does, and ``configure`` skips the install phase
only when that hash is still the current one.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.cache import cache_dir
from gpufleet.catalog.images import component_modes, manifest
from gpufleet.configure import relay
from gpufleet.errors import ProvisionError
from gpufleet.infra.local import bake
from gpufleet.infra.local.image import ensure_node_image
from gpufleet.infra.local.podman import Podman
from gpufleet.inventory import node_facts
from gpufleet.inventory.model import NCCL_TESTS_DIR, Connection, Host, Inventory
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, LocalProvider, Role
from gpufleet.state import ClusterState

LABEL = "gpufleet.cluster"
MPI_PERF_DIR = "/opt/gpufleet/mpi-perf/bin"
# The manifest (catalog/images.yaml) of the node image: Debian 12, nothing of NVIDIA's in it.
LOCAL_IMAGE_MANIFEST = "debian-12-local"
# With provider.gpu_stack the nccl_tests role builds the real binaries here (its default on every backend).
_FIRST_HOST_OFFSET = 10


@dataclass(frozen=True)
class NodePlan:
    name: str
    roles: tuple[Role, ...]


def software_overrides(spec: ClusterSpec) -> dict[str, Any]:
    """No NVIDIA repository on a podman node: a local GPU stack always comes from PyPI."""
    provider = spec.provider
    assert isinstance(provider, LocalProvider)
    return {"gpu_packages": "pypi"} if provider.gpu_stack else {}


# enroot mounts squashfs images and overlays through FUSE (squashfuse, fuse-overlayfs); in a node
# container that needs the host's /dev/fuse passed in (measured 2026-11-24, docs/containers.md).
FUSE_DEVICE = "/dev/fuse"


def device_args(spec: ClusterSpec, fuse: Path = Path(FUSE_DEVICE)) -> list[str]:
    """``podman run`` arguments for the host devices a node needs: /dev/fuse when the spec installs
    enroot and pyxis (``software.containers``), refused with the fix when the host has no FUSE."""
    if not spec.software.containers:
        return []
    if not fuse.is_char_device():
        raise ProvisionError(
            f"software.containers needs {fuse} on this host (enroot mounts images through FUSE in the "
            "nodes), and there is none",
            hint="load the module ('modprobe fuse'), or set software.containers: false in the spec",
        )
    return ["--device", str(fuse)]


def plan_nodes(spec: ClusterSpec) -> list[NodePlan]:
    nodes: list[NodePlan] = []
    for group in spec.node_groups:
        nodes.extend(NodePlan(name, tuple(group.roles)) for name in spec.host_names(group))
    return nodes


class LocalCluster:
    def __init__(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        *,
        nodes: list[NodePlan] | None = None,
    ) -> None:
        """``nodes`` replaces the spec's layout (the image builder's one node in every group)."""
        assert isinstance(spec.provider, LocalProvider)
        self.spec = spec
        self.nodes = nodes if nodes is not None else plan_nodes(spec)
        self.provider: LocalProvider = spec.provider
        self.state = state
        self.reporter = reporter
        self.podman = Podman(cache_dir())
        self.network = f"gpufleet-{spec.name}"
        self.volume = f"gpufleet-{spec.name}-shared"
        self.label = f"{LABEL}={spec.name}"

    # ---- up ---------------------------------------------------------------------------------------

    def up(self, *, image: str | None = None, digest: str | None = None) -> Inventory:
        """Start the nodes from ``image`` (a baked image: ``digest`` its hash of the roles and pins, which
        the inventory records), or else from the plain node image."""
        key = self.state.ensure_ssh_key()
        authorized = self._write_authorized_keys()
        if image is None:
            image, digest = self._node_image(), None
        with self.reporter.step(f"start {len(self.nodes)} nodes on network {self.network}"):
            subnet = self._ensure_network()
            if self.spec.filesystem.kind == "volume" and not self.podman.exists("volume", self.volume):
                self.podman.run(
                    "volume", "create", "--label", self.label, self.volume, what="creating the volume"
                )
            addresses = self._addresses(subnet)
            # A baked image's node configures itself at boot from its facts (docs/boot-configure.md), unless
            # GPUFLEET_CONFIGURE_FROM asks configure to push (here or head): then no node has facts, and
            # its unit skips itself.
            wanted = digest is not None and relay.chosen() == "auto"
            boot = self._write_facts(addresses, digest) if wanted and digest is not None else {}
            baked = [
                self._ensure_node(node, addresses[node.name], image, authorized, digest, boot.get(node.name))
                for node in self.nodes
            ]
        # Side by side: the nodes boot at once, so waiting for each in turn added an SSH login per node.
        with (
            self.reporter.step("wait for systemd and sshd on every node"),
            ThreadPoolExecutor(max_workers=max(1, min(8, len(self.nodes)))) as pool,
        ):
            waits = [pool.submit(self._wait_ready, n.name, addresses[n.name], key) for n in self.nodes]
            for wait in waits:
                wait.result()  # the first node's failure, in node order
        # Nodes kept from an earlier up may come from another image: the hash holds only if all agree.
        common = set(baked)
        inventory = self.inventory(addresses, baked_hash=common.pop() if len(common) == 1 else None)
        # The nodes configured themselves when every node has its facts and runs the image they name.
        at_boot = bool(boot) and inventory.baked_image_hash == digest
        return inventory.model_copy(update={"boot_configure": at_boot})

    def _write_facts(self, addresses: dict[str, str], digest: str) -> dict[str, Path]:
        """Each node's facts (``NodeFacts``) in the state folder, ``boot/<node>/node-facts.json``: the folder
        is bind-mounted read-only at ``FACTS_DIR`` on the node, and the cluster's munge key, read-only, at
        ``LOCAL_MUNGE_KEY``: the key is never in the facts."""
        inventory = self.inventory(addresses, baked_hash=digest)
        inventory = inventory.model_copy(
            update={
                "software": {**self.spec.software.model_dump(mode="json"), **software_overrides(self.spec)}
            }
        )
        source = node_facts.MungeKeyFrom(kind="file", path=node_facts.LOCAL_MUNGE_KEY)
        group_of = {name: g.name for g in self.spec.node_groups for name in self.spec.host_names(g)}
        first = {group_of[host.name]: host for host in reversed(inventory.hosts)}
        peers = node_facts.peer_groups(
            self.spec, {group: node_facts.host_vars_on_node(host) for group, host in first.items()}, addresses
        )
        folders: dict[str, Path] = {}
        for host in inventory.hosts:
            facts = node_facts.facts_for(
                inventory,
                host,
                group=group_of[host.name],
                munge_key=source,
                peers=peers,
            )
            folder = self.state.root / "boot" / host.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "node-facts.json").write_text(facts.render() + "\n", encoding="utf-8")
            folders[host.name] = folder
        return folders

    def _node_image(self) -> str:
        """The plain node image (built once, then cached): what nodes boot when there is no baked image."""
        image, cached = ensure_node_image(
            self.podman,
            cache_dir(),
            release=self.provider.debian_release,
            mirror=self.provider.mirror,
            reporter=self.reporter,
        )
        self.reporter.info(f"node image {image} ({'cached' if cached else 'built'})")
        return image

    def _write_authorized_keys(self) -> Path:
        path = self.state.ssh_dir / "authorized_keys"
        lines = [self.state.public_key.read_text().strip()]
        if self.spec.access.ssh_public_key:
            lines.append(self.spec.access.ssh_public_key)
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        path.chmod(0o600)
        return path

    def _ensure_network(self) -> ipaddress.IPv4Network:
        if not self.podman.exists("network", self.network):
            self.podman.run(
                "network", "create", "--label", self.label, self.network, what="creating the network"
            )
        data = self.podman.inspect("network", self.network)
        subnets = [s["subnet"] for s in data.get("subnets", []) if ":" not in s["subnet"]]
        if not subnets:
            raise ProvisionError(f"podman network {self.network} has no IPv4 subnet: {data.get('subnets')}")
        return ipaddress.IPv4Network(subnets[0])

    def _addresses(self, subnet: ipaddress.IPv4Network) -> dict[str, str]:
        nodes = self.nodes
        hosts = list(subnet.hosts())
        if len(hosts) < _FIRST_HOST_OFFSET + len(nodes):
            raise ProvisionError(f"subnet {subnet} is too small for {len(nodes)} nodes")
        return {node.name: str(hosts[_FIRST_HOST_OFFSET - 1 + i]) for i, node in enumerate(nodes)}

    def _ensure_node(
        self,
        node: NodePlan,
        address: str,
        image: str,
        authorized: Path,
        digest: str | None,
        facts: Path | None = None,
    ) -> str | None:
        """Create or start the node; return the hash of the baked image it runs from (None: not baked)."""
        if self.podman.exists("container", node.name):
            info = self.podman.inspect("container", node.name)
            if info["Config"]["Labels"].get(LABEL) != self.spec.name:
                raise ProvisionError(
                    f"a container named {node.name} exists but does not belong to cluster {self.spec.name}",
                    hint=f"remove it (podman rm -f {node.name}) or rename the cluster",
                )
            if not info["State"]["Running"]:
                self.podman.run("start", node.name, what=f"starting {node.name}")
            return info["Config"]["Labels"].get(bake.HASH_LABEL) or None
        args = [
            "run",
            "-d",
            "--name",
            node.name,
            "--hostname",
            node.name,
            "--network",
            self.network,
            "--ip",
            address,
            "--no-hosts",
            "--systemd=always",
            "--shm-size=256m",
            "--label",
            self.label,
            "--label",
            f"gpufleet.roles={','.join(r.value for r in node.roles)}",
            "-v",
            f"{authorized}:/root/.ssh/authorized_keys:ro",
        ]
        if digest is not None:
            args += ["--label", f"{bake.HASH_LABEL}={digest}"]
        if facts is not None:  # read-only: the node reads its facts and the key, and changes neither
            args += ["-v", f"{facts}:{node_facts.FACTS_DIR}:ro"]
            args += ["-v", f"{self.state.ensure_munge_key()}:{node_facts.LOCAL_MUNGE_KEY}:ro"]
        if self.spec.filesystem.kind == "volume":
            args += ["-v", f"{self.volume}:{self.spec.filesystem.mount_point}"]
        if self.provider.net_admin:  # tc in the node's own namespace (gpufleet.infra.local.faults)
            args += ["--cap-add", "NET_ADMIN"]
        args += device_args(self.spec)
        self.podman.run(*args, image, what=f"starting node {node.name}")
        return digest

    def _wait_ready(self, name: str, address: str, key: Path, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((address, 22), timeout=2):
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise ProvisionError(
                f"sshd on {name} ({address}) did not answer within {timeout:.0f} s",
                hint=f"look at 'podman logs {name}'; then re-run up, or run down",
            )
        # sshd can answer before the node lets a login in (CI saw "Permission denied (publickey)" 0.4 s into
        # a boot, and the same up passing when run again): an SSH-level failure (255) is tried again, each
        # second, until the deadline; the last one is what the error says.
        while True:
            remaining = max(5.0, deadline - time.monotonic())
            try:
                result = subprocess.run(
                    ["ssh", *self.ssh_options(key), f"root@{address}", "systemctl is-system-running --wait"],
                    stdin=subprocess.DEVNULL,  # never the caller's (gpufleet.configure.remote says why)
                    capture_output=True,
                    text=True,
                    timeout=remaining + 10,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise ProvisionError(
                    f"node {name} did not finish booting within {timeout:.0f} s (a start job still runs)",
                    hint=f"look at 'podman exec {name} systemctl list-jobs'; then re-run up, or run down",
                ) from None
            if result.returncode != 255 or time.monotonic() >= deadline:
                break
            time.sleep(1)
        status = result.stdout.strip()
        if status not in ("running", "degraded"):
            raise ProvisionError(
                f"node {name} did not finish booting (systemd says {status or result.stderr.strip()!r})",
                hint=f"look at 'podman exec {name} systemctl --failed'",
            )

    def ssh_options(self, key: Path) -> list[str]:
        return ["-i", str(key), *self._ssh_common()]

    def _ssh_common(self) -> list[str]:
        return [
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            f"UserKnownHostsFile={self.state.known_hosts}",
            "-o",
            "ConnectTimeout=10",
        ]

    # ---- inventory --------------------------------------------------------------------------------

    def _gpu_stack(self, roles: Iterable[Role]) -> dict[str, Any]:
        """With ``provider.gpu_stack``, compute nodes get the GPU user-space stack built for real (no GPU).
        The node image is Debian 12 with nothing of NVIDIA's (its manifest, ``catalog/images.yaml``
        ``debian-12-local``): every component is installed."""
        if self.provider.gpu_stack and Role.COMPUTE in roles:
            return {
                "gpu_stack": "install",
                "gpu_arch": self.provider.gpu_arch,
                "gpu_components": component_modes(manifest(LOCAL_IMAGE_MANIFEST)),
            }
        return {"gpu_stack": "none"}

    def connection(self) -> Connection:
        return Connection(
            user="root",
            private_key_file=str(self.state.private_key),
            ssh_common_args=" ".join(self._ssh_common()[2:6]),
        )

    def inventory(self, addresses: dict[str, str], *, baked_hash: str | None = None) -> Inventory:
        hosts = [
            Host(
                name=node.name,
                roles=list(node.roles),
                address=addresses[node.name],
                private_ip=addresses[node.name],
                instance_type="local",
                gpus=0,
                fabric_interfaces=0,
                cpus=self.provider.node_cpus,
                memory_mb=self.provider.node_memory_mb,
                **self._gpu_stack(node.roles),
            )
            for node in self.nodes
        ]
        filesystem = self.spec.filesystem.model_dump(mode="json")
        return Inventory(
            cluster=self.spec.name,
            provider="local",
            fabric=self.spec.fabric.kind,
            hosts=hosts,
            filesystem=filesystem,
            connection=self.connection(),
            extra_vars={
                # The node image's Python (Debian's python3): no interpreter discovery round trip per
                # node on every run.
                "ansible_python_interpreter": "/usr/bin/python3",
                # Unprivileged containers see cgroup v1 controllers read-only (docs/local.md).
                "slurm_proctrack_type": "proctrack/linuxproc",
                "slurm_task_plugin": "task/none",
                # Open MPI over the podman bridge: shared memory inside a node, TCP on eth0 between nodes.
                "mpi_mca_params": {
                    "btl": "vader,tcp,self",
                    "btl_tcp_if_include": "eth0",
                    "oob_tcp_if_include": "eth0",
                    "pml": "ob1",
                    # Every node shares the host's cores: with more ranks than cores, a rank that
                    # busy-polls for a message holds the core the sender needs. Yielding when idle
                    # took a 4-rank all_reduce from 93-98 s to 21-34 s at load 12 (docs/benchmarks.md).
                    "mpi_yield_when_idle": 1,
                },
                "gpufleet_nccl_env": {},
            },
            nccl_tests_dir=NCCL_TESTS_DIR if self.provider.gpu_stack else MPI_PERF_DIR,
            # The content hash of the baked image every node runs from (None: not baked).
            # gpufleet configure skips the install phase when it is still the current one.
            baked_image_hash=baked_hash,
            # Every node is a podman container (roles: enroot's cgroup hook, the stand-in GPU exporter).
            node_is_container=True,
        )

    # ---- status and down --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        nodes = []
        for name in self.podman.names_with_label("container", self.label):
            info = self.podman.inspect("container", name)
            networks = info.get("NetworkSettings", {}).get("Networks", {}) or {}
            nodes.append(
                {
                    "name": name,
                    "running": bool(info["State"]["Running"]),
                    "status": info["State"]["Status"],
                    "ip": next((n.get("IPAddress") for n in networks.values()), None),
                    "roles": info["Config"]["Labels"].get("gpufleet.roles", ""),
                }
            )
        return {
            "nodes": sorted(nodes, key=lambda n: n["name"]),
            "network": self.network if self.podman.exists("network", self.network) else None,
            "volume": self.volume if self.podman.exists("volume", self.volume) else None,
        }

    def destroy(self) -> list[str]:
        removed: list[str] = []
        with self.reporter.step("remove nodes, network and volume"):
            # One podman call per node ('podman rm -f a b c' with one name missing has left the others
            # running), the calls side by side: each waits up to 2 s for systemd in the node to stop.
            names = self.podman.names_with_label("container", self.label)
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
                list(pool.map(self._remove_container, names))
            removed.extend(f"container {name}" for name in names)
            for name in self.podman.names_with_label("volume", self.label):
                self.podman.run("volume", "rm", "-f", name, what=f"removing volume {name}")
                removed.append(f"volume {name}")
            for name in self.podman.names_with_label("network", self.label):
                self.podman.run("network", "rm", "-f", name, what=f"removing network {name}")
                removed.append(f"network {name}")
        return removed

    def _remove_container(self, name: str) -> None:
        self.podman.run("rm", "-f", "-t", "2", name, check=False, what=f"removing {name}")
        if self.podman.exists("container", name):
            self.podman.run("rm", "-f", "-t", "0", name, what=f"removing {name}")

    def leftovers(self) -> list[str]:
        found = [f"container {n}" for n in self.podman.names_with_label("container", self.label)]
        found += [f"volume {n}" for n in self.podman.names_with_label("volume", self.label)]
        found += [f"network {n}" for n in self.podman.names_with_label("network", self.label)]
        return found
