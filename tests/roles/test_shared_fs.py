"""The shared_fs role, converged in check mode with the facts of each platform it supports: the mount source,
type, options and fstab line it renders per filesystem kind, and the clear errors of its preflight.

The hosts are this machine (connection local) carrying another platform's facts (``shared_fs/platforms.yml``);
only the ``configure`` phase runs (the ``install`` phase talks to the vendors' repositories, which a test
cannot reach). The fstab line is written, into a scratch file, by the module the role calls, with the
parameters the role's mount task was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import run_playbook

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).with_name("shared_fs")
PLATFORMS = yaml.safe_load((HERE / "platforms.yml").read_text())

FSX = {
    "kind": "fsx_lustre",
    "mount_point": "/fsx",
    "deployment_type": "PERSISTENT_2",
    "size_gib": 2400,
    "dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "mount_name": "abcdefgh",
}
MANAGED_LUSTRE = {
    "kind": "managed_lustre",
    "mount_point": "/lustre",
    "mount_source": "10.252.0.5@tcp:/lustre",
}
AZURE_LUSTRE = {
    "kind": "azure_lustre",
    "mount_point": "/lustre",
    "mount_source": "10.40.64.4@tcp:/lustrefs",
    "sku": "AMLFS-Durable-Premium-250",
    "size_tib": 16,
}
FILESTORE = {
    "kind": "filestore",
    "mount_point": "/shared",
    "mount_source": "10.253.0.2:/shared",
    "tier": "ZONAL",
}
NFS = {"kind": "nfs", "mount_point": "/shared", "server": "nas.example.internal", "export": "/export/home"}

# What each kind renders: (fstab line, i.e. source, mount point, type, options, dump, pass).
EXPECTED = {
    "fsx_lustre": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com@tcp:/abcdefgh /fsx lustre "
    "defaults,noatime,flock,_netdev,x-systemd.automount 0 0",
    "managed_lustre": "10.252.0.5@tcp:/lustre /lustre lustre defaults,noatime,_netdev 0 0",
    "azure_lustre": "10.40.64.4@tcp:/lustrefs /lustre lustre defaults,noatime,flock,_netdev 0 0",
    "filestore": "10.253.0.2:/shared /shared nfs "
    "hard,timeo=600,retrans=3,rsize=262144,wsize=1048576,resvport,async,_netdev 0 0",
    "nfs": "nas.example.internal:/export/home /shared nfs defaults,hard,noatime,_netdev 0 0",
}
FILESYSTEMS = {
    "fsx_lustre": FSX,
    "managed_lustre": MANAGED_LUSTRE,
    "azure_lustre": AZURE_LUSTRE,
    "filestore": FILESTORE,
    "nfs": NFS,
}


def converge(
    tmp_path: Path, hosts: dict[str, tuple[str, dict]], **host_vars: object
) -> tuple[int, dict[str, dict[str, dict]]]:
    """Run converge.yml in check mode (configure phase) on ``{host: (platform, filesystem)}``, with
    ``host_vars`` on every host; returns the exit code and ``{host: {task name: result}}`` from Ansible's
    json callback (the role's task names without the ``shared_fs : `` prefix)."""
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "scratch": str(tmp_path),
            },
            "hosts": {
                name: {
                    "platform": PLATFORMS[platform],
                    "gpufleet_filesystem": filesystem,
                    "shared_fs_fstab": str(tmp_path / f"{name}.role-fstab"),
                    **host_vars,
                }
                for name, (platform, filesystem) in hosts.items()
            },
        }
    }
    rc, results = run_playbook(tmp_path, inventory, HERE / "converge.yml", "--check", "--tags", "configure")
    return rc, {name: results.get(name, {}) for name in hosts}


MOUNT = "Mount the filesystem and persist it in fstab"


def test_each_kind_renders_its_mount_on_each_platform(tmp_path):
    hosts = {
        f"{platform}-{kind}".replace(".", ""): (platform, FILESYSTEMS[kind])
        for platform in ("ubuntu-22.04", "ubuntu-24.04")
        for kind in EXPECTED
    }
    hosts["debian-12-nfs"] = ("debian-12", NFS)
    hosts["debian-12-volume"] = ("debian-12", {"kind": "volume", "mount_point": "/shared"})
    hosts["ubuntu-2404-none"] = ("ubuntu-24.04", {"kind": "none"})
    rc, results = converge(tmp_path, hosts)
    failed = {h: [t for t, r in tasks.items() if r.get("failed")] for h, tasks in results.items()}
    assert rc == 0 and not any(failed.values()), failed
    for host, (_platform, filesystem) in hosts.items():
        kind = filesystem["kind"]
        tasks = results[host]
        if kind in ("volume", "none"):
            # nothing to mount: up mounted the volume; the checks of the volume run outside check mode
            assert tasks[MOUNT].get("skipped") is True, (host, tasks[MOUNT])
            assert not (tmp_path / f"{host}.fstab").exists()
            continue
        mount = tasks[MOUNT]
        source, path, fstype, options, _dump, _pass = EXPECTED[kind].split(" ")
        rendered = (mount["src"], mount["name"], mount["fstype"], mount["opts"])
        assert rendered == (source, path, fstype, options), (host, mount)
        assert mount["changed"] is True and mount["fstab"] == str(tmp_path / f"{host}.role-fstab"), mount
        assert "_netdev" in mount["opts"].split(","), host
        written = (tmp_path / f"{host}.fstab").read_text().splitlines()
        assert written == [EXPECTED[kind]], (host, written)
        role_fstab = tmp_path / f"{host}.role-fstab"  # the module creates it empty, even in check mode
        assert not role_fstab.exists() or role_fstab.read_text() == "", "check mode wrote the role's fstab"


FSTAB_GENERATOR = Path("/lib/systemd/system-generators/systemd-fstab-generator")


def test_the_fsx_mount_requires_no_unit_ubuntu_lacks(tmp_path):
    """systemd turns the fstab line into units with its own fstab generator (run here on the role's FSx line):
    an x-systemd.requires=network.service (AWS's fstab line, written for Amazon Linux) becomes Requires= on a
    unit Ubuntu does not have, and the mount fails at boot; ParallelCluster mounts Lustre without it
    (cookbook resources/lustre/partial/_mount_unmount.rb). _netdev alone orders the mount after
    network-online.target (systemd.mount(5), "Mount units referring to remote file systems")."""
    if not FSTAB_GENERATOR.exists():
        pytest.fail(f"needs systemd's {FSTAB_GENERATOR} (package systemd)")
    defaults = yaml.safe_load((HERE.parents[2] / "roles/shared_fs/defaults/main.yml").read_text())
    options = ",".join(defaults["shared_fs_default_mount_options"]["fsx_lustre"])
    source = EXPECTED["fsx_lustre"].split(" ")[0]
    (tmp_path / "fstab").write_text(f"{source} /fsx lustre {options} 0 0\n")
    out = tmp_path / "units"
    out.mkdir()
    env = {**os.environ, "SYSTEMD_FSTAB": str(tmp_path / "fstab"), "SYSTEMD_PROC_CMDLINE": ""}
    subprocess.run([str(FSTAB_GENERATOR), str(out), str(out), str(out)], env=env, check=True)
    units = {path.name: path.read_text() for path in out.rglob("fsx.*")}
    assert set(units) >= {"fsx.mount", "fsx.automount"}, units
    requires = [line for text in units.values() for line in text.splitlines() if line.startswith("Requires=")]
    assert requires == [], requires


def test_user_options_replace_the_kinds_defaults(tmp_path):
    options = ["ro", "hard", "nfsvers=4.2", "_netdev"]
    rc, results = converge(tmp_path, {"nfs-ro": ("debian-12", NFS)}, shared_fs_mount_options=options)
    assert rc == 0, results["nfs-ro"]
    assert results["nfs-ro"][MOUNT]["opts"] == "ro,hard,nfsvers=4.2,_netdev"
    written = (tmp_path / "nfs-ro.fstab").read_text()
    assert written == "nas.example.internal:/export/home /shared nfs ro,hard,nfsvers=4.2,_netdev 0 0\n"


@pytest.mark.parametrize(
    ("platform", "filesystem", "message"),
    [
        (
            "debian-12",
            FSX,
            "runs Debian 12.8 (bookworm), kernel 6.1.0-28-cloud-amd64: the fsx_lustre client is built for "
            "Ubuntu jammy/noble. Use one of those images.",
        ),
        (
            "ubuntu-24.04",
            {key: value for key, value in FSX.items() if key != "mount_name"},
            "gpufleet_filesystem (fsx_lustre) has mount_point '/fsx' (an absolute path other than / is "
            "needed) and lacks mount_name",
        ),
        (
            "rocky-9",
            NFS,
            "shared_fs supports Debian and Ubuntu nodes only (Debian 12, Ubuntu 22.04 and 24.04; RHEL, Rocky "
            "and AlmaLinux are not supported); bad runs Rocky 9.6 (RedHat family).",
        ),
        (
            "ubuntu-24.04",
            {"kind": "lustre", "mount_point": "/x"},
            "gpufleet_filesystem.kind is 'lustre'; the shared_fs role mounts none, volume, nfs, filestore, "
            "fsx_lustre, managed_lustre, azure_lustre.",
        ),
        (
            "ubuntu-22.04",
            {**NFS, "mount_point": "/"},
            "gpufleet_filesystem (nfs) has mount_point '/' (an absolute path other than / is needed) and "
            "lacks nothing",
        ),
    ],
)
def test_preflight_says_what_is_wrong(tmp_path, platform, filesystem, message):
    rc, results = converge(tmp_path, {"bad": (platform, filesystem)})
    failures = [r["msg"] for r in results["bad"].values() if r.get("failed")]
    assert rc != 0 and len(failures) == 1, results["bad"]
    assert message in failures[0], failures[0]
    assert MOUNT not in results["bad"]


@pytest.mark.parametrize(
    ("snapshot", "line"),
    [
        (
            "aws/snapshots/aws-p5.plan.json",
            "fs-26136afd243f967be.fsx.us-east-1.amazonaws.com@tcp:/89c0dd8a /fsx lustre "
            "defaults,noatime,flock,_netdev,x-systemd.automount 0 0",
        ),
        (
            "gcp/snapshots/gcp-a3-mega.plan.json",
            "10.252.0.2@tcp:/lustre /lustre lustre defaults,noatime,_netdev 0 0",
        ),
    ],
)
def test_every_node_of_a_cloud_inventory_mounts_its_filesystem(tmp_path, snapshot, line):
    """The inventory each cloud program's outputs make (its reviewed plan snapshot) mounts on every node."""
    from gpufleet.inventory.stack import from_stack_outputs

    outputs = json.loads((ROOT / "tests" / "infra" / snapshot).read_text())["outputs"]
    inventory = from_stack_outputs(outputs)
    filesystem = inventory.to_ansible()["all"]["vars"]["gpufleet_filesystem"]
    names = [host.name for host in inventory.hosts]
    rc, results = converge(tmp_path, {name: ("ubuntu-22.04", filesystem) for name in names})
    failed = {name: [t for t, r in tasks.items() if r.get("failed")] for name, tasks in results.items()}
    assert rc == 0, failed
    assert len(names) >= 3
    for name in names:
        assert (tmp_path / f"{name}.fstab").read_text().splitlines() == [line], name


# ---- the cross-node check, run for real ------------------------------------------------------------

VERIFY_PLAY = [
    {
        "name": "Check the shared filesystem",
        "hosts": "all",
        "gather_facts": True,
        "gather_subset": ["!all", "min"],
        "roles": [{"role": "shared_fs"}],
    }
]


def verify(tmp_path: Path, mounts: dict[str, str]) -> tuple[int, dict[str, dict[str, dict]]]:
    """Run the role's configure phase for real (not check mode) on hosts that are all this machine, each
    with a ``volume`` at its own mount point; returns the exit code and ``{host: {task name: result}}``."""
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "hosts": {
                name: {"gpufleet_filesystem": {"kind": "volume", "mount_point": mount}}
                for name, mount in mounts.items()
            },
        }
    }
    rc, results = run_playbook(tmp_path, inventory, VERIFY_PLAY, "--tags", "configure")
    return rc, {name: results.get(name, {}) for name in mounts}


def probe_files(directory: str, hosts: list[str]) -> list[str]:
    return sorted(
        entry.name
        for entry in Path(directory).iterdir()
        if any(entry.name.startswith(f".gpufleet-shared-fs-probe-{host}-") for host in hosts)
    )


READ = "Read the probe file another node wrote, and remove it (this node is its only reader)"
CHECKED = "Assert that this node wrote its probe file and read what the other node wrote"
MOUNTED = "Assert that the filesystem is mounted where the inventory says"
CLEANED = "Remove this run's probe files from the failed check"
FAILED = "Fail with what the check found"


@pytest.mark.skipif(not os.path.ismount("/dev/shm"), reason="needs /dev/shm mounted")
def test_nodes_that_share_the_mount_read_each_others_probe_and_leave_nothing(tmp_path):
    hosts = [f"sfs-{os.getpid()}-{i}" for i in range(3)]
    rc, results = verify(tmp_path, dict.fromkeys(hosts, "/dev/shm"))
    failed = {h: {t: r.get("msg") for t, r in ran.items() if r.get("failed")} for h, ran in results.items()}
    assert rc == 0, failed
    for index, host in enumerate(hosts):
        peer = hosts[(index + 1) % len(hosts)]
        assert results[host][CHECKED]["msg"] == f"read {peer}'s probe file in /dev/shm"
        assert results[host][READ]["stdout"].startswith(f"{peer} ")
    assert probe_files("/dev/shm", hosts) == []


@pytest.mark.skipif(
    not (os.path.ismount("/dev/shm") and os.path.ismount("/proc")), reason="needs /dev/shm and /proc mounted"
)
def test_nodes_that_do_not_share_it_fail_with_what_each_saw_and_remove_their_probes(tmp_path):
    # b's mount point is /proc: findmnt sees a mount there, but no file can be written in it.
    a, b = f"sfs-{os.getpid()}-a", f"sfs-{os.getpid()}-b"
    rc, results = verify(tmp_path, {a: "/dev/shm", b: "/proc"})
    assert rc != 0
    assert results[a][MOUNTED].get("failed") is not True
    said_a, said_b = results[a][CHECKED]["msg"], results[b][CHECKED]["msg"]
    assert results[a][CHECKED]["failed"] and results[b][CHECKED]["failed"]
    assert f"{a} could not read back in /dev/shm what {b} wrote" in said_a, said_a
    assert "do not share one filesystem at /dev/shm" in said_a
    assert f"{b} could not write its probe file /proc/.gpufleet-shared-fs-probe-{b}-" in said_b, said_b
    assert f"{b} could not read back in /proc what {a} wrote" in said_b, said_b
    for host in (a, b):
        assert results[host][CLEANED].get("failed") is not True
        assert "the shared filesystem check failed at" in results[host][FAILED]["msg"]
    assert probe_files("/dev/shm", [a, b]) == [], "the failed check left its probe file behind"
