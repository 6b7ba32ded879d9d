"""The GPU and fabric plays of playbooks/site.yml run against twins of the images gpufleet boots.

Each twin (tests/twins/images.py) is a Debian 12 node of the local backend's image, prepared at start to
ship what its manifest in src/gpufleet/catalog/images.yaml says the real image ships, from a stand-in
vendor repository (tests/twins/vendor_repo.py: NVIDIA's names, epochs, dependencies, several versions,
the vendors' file layouts; captured tool outputs). Twins: DLAMI Base OSS Ubuntu 24.04 and 22.04, Google's
ubuntu-accelerator-2404 (580), DGX OS 7, plain Ubuntu 24.04, and a negative one (a DLAMI 24.04 whose CUDA
is 12.8 where the manifest says 13.2).

The inventory is gpufleet's own: ``infra.outputs.host_record`` turns each twin's manifest into the host's
per-component decision (``gpufleet_gpu_components``, ``gpufleet_gpu_paths``), ``Inventory`` writes it; so
install or verify is decided as for a real cluster. The plays are site.yml's own (the facts, the
gpu_stack grouping, "GPU node stack" and "Fabric"), in one ansible-playbook run with every twin as a host.

Runs: (1) every twin: the verify twins converge, plain Ubuntu stops for the driver's reboot, the negative
fails in cuda_toolkit's verify naming CUDA, 12.8 found and 12.9 needed; (2) after restarting plain Ubuntu's
container (its "reboot"), every twin but the negative converges, and those that converged in (1) change
nothing; (3) plain Ubuntu again: nothing changes. Printed per twin:
the manifest's decision per component, the packages the roles installed, the node check's verdict.

Not modelled (see tests/twins/images.py and docs/gpu-stack.md, "Twin images in CI"): kernel modules and
/proc/driver/nvidia/version, real reboots, GPUs, RDMA devices (so Google's GPUDirect and InfiniBand roles
are not run: those twins run the ethernet fabric role), Ubuntu's own userland, nccl-tests (built from
source by nvcc, which the twins' stand-in compiler cannot do; tests/cluster/test_gpu_stack.py builds it).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.infra.local.cluster import cache_dir
from gpufleet.infra.local.image import ensure_node_image
from gpufleet.infra.local.podman import Podman
from gpufleet.infra.outputs import host_record
from gpufleet.inventory.model import Connection
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.progress import SilentReporter
from gpufleet.spec.model import Role, Software
from twins.images import TWINS, Twin
from twins.vendor_repo import GDRDRV_MODULE, MIRROR, PROC_VERSION, build_mirror

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SITE_PLAYS = ("Group the compute nodes by GPU stack mode", "GPU node stack", "Fabric")
# The GDRCopy release the gdrcopy role installs (its defaults), which the mirror carries (twins.vendor_repo).
GDRCOPY_DEFAULTS = ROOT / "roles" / "gdrcopy" / "defaults" / "main.yml"
GDRCOPY_PIN = yaml.safe_load(GDRCOPY_DEFAULTS.read_text())["gdrcopy_version"]
NOT_RUN_ROLES = {"nccl_tests"}  # builds nccl-tests with nvcc: the twins' nvcc only prints its version
# The test's stand-ins for what a container lacks (the same as test_gpu_roles_converge): no kernel headers
# to build for, the loaded module's version in a file a boot unit writes, no initramfs; GDRCopy's gdrdrv
# module marked loaded by its init script's stand-in (tests/twins/vendor_repo.py) in place of /sys/module.
EXTRA = {
    "__nvidia_driver_build_packages": [],
    "__nvidia_driver_proc_version": PROC_VERSION,
    "__nvidia_driver_initramfs_command": ["true"],
    "__gdrcopy_build_packages": [],
    "__gdrcopy_module_dir": GDRDRV_MODULE,
}


def twin_playbook() -> list[dict[str, Any]]:
    """site.yml's GPU and fabric plays, unchanged but for nccl_tests, after its fact gathering."""
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    first = site[0]
    plays: list[dict[str, Any]] = [
        {
            "name": "Gather facts as site.yml's first play does",
            "hosts": "compute",
            "become": True,
            "gather_subset": first["gather_subset"],
            "tasks": [],
        }
    ]
    by_name = {play["name"]: play for play in site}
    for name in SITE_PLAYS:
        play = dict(by_name[name])
        if "roles" in play:
            play["roles"] = [role for role in play["roles"] if role["role"] not in NOT_RUN_ROLES]
        plays.append(play)
    return plays


def twin_inventory(twins: list[Twin], addresses: dict[str, str], key: Path) -> dict[str, Any]:
    """gpufleet's inventory of the twins: host_record from each twin's manifest, Inventory's YAML."""
    catalog = load_catalog()
    hosts = [
        host_record(
            name="twin-head",  # the inventory needs a controller; no play here runs on it
            roles=[Role.CONTROLLER],
            private_ip="192.0.2.1",
            instance_type="local",
            item=catalog.get("local"),
            fabric_interfaces=0,
        )
    ]
    for twin in twins:
        item = catalog.get(twin.instance_type)
        assert item is not None
        hosts.append(
            host_record(
                name=twin.name,
                roles=[Role.COMPUTE],
                private_ip=addresses[twin.name],
                instance_type=twin.instance_type,
                item=item,
                fabric_interfaces=item.fabric.interfaces,
                image=twin.image,
            )
        )
    outputs = {"cluster": "twins", "provider": "baremetal", "fabric": "ethernet", "hosts": hosts}
    ssh = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10"
    inventory = from_stack_outputs(
        outputs, connection=Connection(user="root", private_key_file=str(key), ssh_common_args=ssh)
    )
    inventory = inventory.model_copy(
        update={
            "software": Software().model_dump(mode="json"),
            "extra_vars": {
                # the stand-in mirror in place of NVIDIA's download servers
                "nvidia_driver_repo_url": f"file://{MIRROR}/cuda/repos",
                "cuda_toolkit_repo_url": f"file://{MIRROR}/cuda/repos",
                "gdrcopy_url": f"file://{MIRROR}/gdrcopy",
                # the container toolkit from the mirror the CUDA keyring's source names (NVIDIA's CUDA
                # repository carries it too: Cluster Toolkit installs it from there), not nvidia.github.io
                "container_toolkit_add_repo": False,
                "efa_disable_ptrace_protection": False,  # /proc/sys is read-only in a container
            },
        }
    )
    data = inventory.to_ansible()
    for twin in twins:
        host = data["all"]["children"]["compute"]["hosts"][twin.name]
        # The twins come from several clouds in one run, so each carries its own provider and fabric; and
        # they share a 2-core machine, so each declares what the container has, not the instance type.
        host.update(
            {
                "gpufleet_provider": twin.manifest.provider,
                "gpufleet_fabric": twin.fabric,
                "gpufleet_cpus": 1,
                "gpufleet_memory_mb": 1,
            }
        )
    return data


def recap(output: str) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for line in output.splitlines():
        name, _, rest = line.partition(" : ")
        if "ok=" in rest and name.strip().startswith("twin-"):
            found[name.strip()] = {k: int(v) for k, v in (part.split("=") for part in rest.split())}
    return found


class Twins:
    def __init__(
        self, podman: Podman, work: Path, image: str, network: str, addresses: dict[str, str]
    ) -> None:
        self.podman, self.work, self.image = podman, work, image
        self.network, self.addresses = network, addresses
        self.key = work / "id_ed25519"
        self.runs = 0  # each run's output is kept in <work>/play-<n>.log

    def shell(self, name: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.podman.run("exec", name, "sh", "-c", command, check=check)

    def start(self, twin: Twin) -> None:
        self.podman.run("rm", "-f", "-t", "0", twin.name, check=False)
        self.podman.run(
            "run", "-d", "--name", twin.name, "--hostname", twin.name, "--no-hosts", "--systemd=always",
            "--network", f"{self.network}:interface_name={twin.host_nic}", "--ip", self.addresses[twin.name],
            "-v", f"{self.work / 'authorized_keys'}:/root/.ssh/authorized_keys:ro",
            "-v", f"{self.work / 'mirror'}:{MIRROR}:ro", self.image,
        )  # fmt: skip
        self.wait_running(twin.name)
        done = self.shell(twin.name, twin.prepare_script(), check=False)
        assert done.returncode == 0, f"{twin.name}: preparing the twin failed: {done.stdout}{done.stderr}"

    def wait_running(self, name: str) -> None:
        for _ in range(90):
            state = self.podman.run(
                "exec", name, "systemctl", "is-system-running", check=False
            ).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(1)
        raise AssertionError(f"{name}: systemd did not come up ({state})")

    def wait_ssh(self, name: str) -> None:
        """Wait until the twin's sshd answers a login (systemd can report running before sshd listens)."""
        argv = ["ssh", "-i", str(self.key), "-o", "BatchMode=yes", "-o", "ControlMaster=no",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "ConnectTimeout=5", f"root@{self.addresses[name]}", "true"]  # fmt: skip
        for _ in range(60):
            if subprocess.run(argv, capture_output=True, check=False, timeout=30).returncode == 0:
                return
            time.sleep(1)
        raise AssertionError(f"{name}: sshd does not accept the test's key after the restart")

    def packages(self, name: str) -> dict[str, str]:
        out = self.shell(name, "dpkg-query -W -f '${Package}=${Version}\\n'").stdout
        return dict(line.split("=", 1) for line in out.split())

    def play(self, inventory: dict[str, Any], limit: str | None = None) -> subprocess.CompletedProcess[str]:
        (self.work / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        (self.work / "twins.yml").write_text(yaml.safe_dump(twin_playbook(), sort_keys=False))
        playbook = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
        argv = [playbook, "-i", str(self.work / "inventory.yml"), str(self.work / "twins.yml"),
                "-e", json.dumps(EXTRA), "--forks", str(len(TWINS))]  # fmt: skip
        if limit:
            argv += ["--limit", limit]
        live = {
            "ANSIBLE_LOG_PATH": str(self.work / f"play-{self.runs + 1}.live.log"),  # progress, while it runs
            # Each run gets its own SSH control sockets: `podman restart -t 0` kills a twin without closing
            # its TCP connections, so a master kept alive from the run before (ControlPersist, ansible.cfg)
            # would hand the next run a dead connection and Ansible reports the restarted twin unreachable.
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.work / f"cp-{self.runs + 1}"),
        }
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1200,
                              check=False, cwd=ROOT,
                              env={**self.podman.env, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                   "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), **live})  # fmt: skip
        self.runs += 1
        (self.work / f"play-{self.runs}.log").write_text(done.stdout + done.stderr)
        return done


NETWORK = "gpufleet-twins"


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    if shutil.which("podman") is None or shutil.which("dpkg-scanpackages") is None or os.geteuid() != 0:
        pytest.fail("needs root, podman and dpkg-dev: run scripts/bootstrap.sh test")
    work = tmp_path_factory.mktemp("gpu-twins")
    podman = Podman(work / "podman")
    image, _ = ensure_node_image(podman, cache_dir(), release="bookworm", mirror="http://deb.debian.org/debian",
                                 reporter=SilentReporter())  # fmt: skip
    build_mirror(work / "mirror")
    # Ansible reaches the twins over SSH with pipelining (ansible.cfg), as it reaches a real cluster: the
    # podman connection runs several podman processes per task and host, about 5 times slower here.
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (work / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    (work / "authorized_keys").chmod(0o600)
    for twin in TWINS:
        podman.run("rm", "-f", "-t", "0", twin.name, check=False)
    podman.run("network", "rm", "-f", NETWORK, check=False)
    podman.run("network", "create", NETWORK)
    subnet = next(
        s["subnet"] for s in podman.inspect("network", NETWORK)["subnets"] if ":" not in s["subnet"]
    )
    hosts = list(ipaddress.IPv4Network(subnet).hosts())
    addresses = {twin.name: str(hosts[10 + index]) for index, twin in enumerate(TWINS)}
    nodes = Twins(podman, work, image, NETWORK, addresses)
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(nodes.start, TWINS))
        yield nodes
    finally:
        for twin in TWINS:
            podman.run("rm", "-f", "-t", "0", twin.name, check=False)
        podman.run("network", "rm", "-f", NETWORK, check=False)


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_every_twin_installs_what_its_image_lacks_verifies_the_rest_and_ends_healthy(twins, capsys):
    started = time.monotonic()
    inventory = twin_inventory(TWINS, twins.addresses, twins.key)
    shipped = {twin.name: twins.packages(twin.name) for twin in TWINS}

    first = twins.play(inventory)
    text, runs = _squash(first.stdout), recap(first.stdout)
    for twin in TWINS:
        assert twin.name in runs, f"{twin.name} is not in the recap: {first.stdout[-3000:]}"
    converged = [t.name for t in TWINS if t.name not in ("twin-ubuntu-2404", "twin-dlami-2404-old-cuda")]
    for name in converged:
        assert runs[name]["failed"] == runs[name]["unreachable"] == 0, (
            f"{name} failed on the first run:\n{first.stdout[-6000:]}"
        )
    # Plain Ubuntu installs the driver (the newest 580 build: the branch pin) and stops for the reboot.
    assert runs["twin-ubuntu-2404"]["failed"] == 1, first.stdout[-6000:]
    reboot = (
        "twin-ubuntu-2404 needs a reboot: the NVIDIA driver 580.105.08 is installed but the loaded kernel"
    )
    assert f"{reboot} module is none." in text, first.stdout[-4000:]
    # The negative: the image's CUDA is older than its manifest says, and verify names the gap.
    assert runs["twin-dlami-2404-old-cuda"]["failed"] == 1
    assert ("CUDA on twin-dlami-2404-old-cuda (verify mode, /usr/local/cuda): nvcc reports release 12.8; "
            "libcudart.so.* in /usr/local/cuda/lib64: 2. Needed: at least 12.9. The image does not carry the "
            "pinned CUDA") in text, first.stdout[-4000:]  # fmt: skip

    # The "reboot": the container restarts, and the module the roles installed is the loaded one.
    twins.podman.run("restart", "-t", "0", "twin-ubuntu-2404")
    twins.wait_running("twin-ubuntu-2404")
    twins.wait_ssh("twin-ubuntu-2404")
    healthy = [t for t in TWINS if not t.expect_failure]
    limit = ",".join(t.name for t in healthy)
    second = twins.play(inventory, limit=limit)
    runs = recap(second.stdout)
    assert second.returncode == 0 and all(runs[t.name]["failed"] == 0 for t in healthy), second.stdout[-6000:]
    # Idempotence: the second run of every twin changes nothing (plain Ubuntu's second full run is the third).
    third = twins.play(inventory, limit="twin-ubuntu-2404")
    runs = {**{name: run for name, run in runs.items() if name in converged}, **recap(third.stdout)}
    assert third.returncode == 0, third.stdout[-4000:]
    changed = {name: run["changed"] for name, run in runs.items() if run["changed"]}
    assert not changed, f"a second run changed something: {changed}\n{second.stdout[-6000:]}"

    report = ["", "GPU twins (tests/cluster/test_gpu_twins.py):"]
    hosts = inventory["all"]["children"]["compute"]["hosts"]
    for twin in healthy:
        modes = hosts[twin.name]["gpufleet_gpu_components"]
        now = twins.packages(twin.name)
        added = sorted(f"{p}={v}" for p, v in now.items() if p not in shipped[twin.name] and _vendor(p))
        moved = sorted(p for p, v in shipped[twin.name].items() if now.get(p) != v)
        assert not moved, f"{twin.name}: the roles changed what the image ships: {moved}"
        # As gpu_health's own check: no slurmd here, and no RDMA device (EFA counts /sys/class/infiniband).
        check = twins.podman.run("exec", twin.name, "/usr/local/sbin/gpufleet-node-check", "--check",
                                 "--skip", "services,fabric", check=False)  # fmt: skip
        assert check.returncode == 0 and check.stdout.startswith(
            f"gpufleet-node-check: OK {twin.name}: 8 GPUs"
        ), check.stdout + check.stderr
        verified = [c for c, m in modes.items() if m == "verify"]
        installed = [c for c, m in modes.items() if m == "install"]
        detected = [c for c, m in modes.items() if m == "detect"]
        report += [
            f"  {twin.name} ({twin.manifest.name} {twin.manifest.release}, {twin.instance_type}, "
            f"fabric {twin.fabric}):",
            f"    verified (the image ships them): {', '.join(verified) or 'none'}",
            f"    to install (the image lacks them): {', '.join(installed) or 'none'}",
            f"    found out on the node (no source settles them): {', '.join(detected) or 'none'}",
            f"    installed by the roles: {', '.join(added) or 'nothing'}",
            f"    node check: {check.stdout.strip()}",
        ]
        _expect_installed(twin, modes, now)
    report.append(
        "  negative twin-dlami-2404-old-cuda: FAIL in cuda_toolkit verify (12.8 found, 12.9 needed)"
    )
    report.append(
        f"  three runs of the plays ({len(TWINS)}, 5 and 1 twins): {time.monotonic() - started:.0f} s"
    )
    with capsys.disabled():
        print("\n".join(report))


def _vendor(package: str) -> bool:
    return package.startswith(("nvidia-", "libnvidia-", "cuda-", "libnccl", "datacenter-gpu-manager", "gdr",
                               "libgdrapi", "libnccl-ofi", "libfabric"))  # fmt: skip


def _expect_installed(twin: Twin, modes: dict[str, str], now: dict[str, str]) -> None:
    """What each install decision must have left on the twin, at the roles' pins (Software's defaults)."""
    pins = Software()
    expected: dict[str, tuple[str, str]] = {}
    if modes["driver"] == "install":
        expected["nvidia-open"] = ("driver", "580.105.08-1")
    if modes["cuda"] == "install":
        expected[f"cuda-toolkit-{pins.cuda.replace('.', '-')}"] = ("cuda", "12.9.1-1")
    if modes["nccl"] == "install":
        expected["libnccl2"] = ("nccl", f"{pins.nccl}-1+cuda{pins.cuda}")
    if modes["dcgm"] == "install":
        expected[f"datacenter-gpu-manager-4-cuda{pins.cuda.split('.')[0]}"] = ("dcgm", "1:4.4.2-1")
    if modes["container_toolkit"] == "install":  # the four at the container_toolkit role's pin
        expected["nvidia-container-toolkit"] = ("container_toolkit", "1.20.0-1")
        expected["libnvidia-container1"] = ("container_toolkit", "1.20.0-1")
    if modes["gdrcopy"] == "install" and twin.fabric in ("efa", "infiniband", "roce"):  # its own component
        expected["gdrcopy"] = ("gdrcopy", f"{GDRCOPY_PIN}-1")  # the gdrcopy role's pin, whatever NCCL's mode
    wrong = {
        pkg: (component, want, now.get(pkg))
        for pkg, (component, want) in expected.items()
        if now.get(pkg) != want
    }
    assert not wrong, f"{twin.name}: component, expected, found: {wrong}"
