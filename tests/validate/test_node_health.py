"""The per-node health script (run for real, with and without tools) and how its report is judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.inventory.model import Host
from gpufleet.spec.model import Role
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN
from gpufleet.validate.judge_health import evaluate_health, evaluate_node
from gpufleet.validate.slurm import HealthRun, SlurmState, node_health_script, parse_health_output


def _run_script(fabric: str, path: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", node_health_script(), "--fabric", fabric],
        capture_output=True,
        text=True,
        env={"PATH": path, "SLURMD_NODENAME": "node-7"},
        timeout=60,
        check=True,
    )
    answers = parse_health_output(done.stdout)
    assert list(answers) == ["node-7"], done.stdout
    return answers["node-7"]


def test_script_without_any_tool_says_not_present(tmp_path):
    report = _run_script("efa", str(tmp_path))  # an empty PATH: no nvidia-smi, dcgmi, dmesg, systemctl
    assert report["gpus"] == {"present": False, "count": None, "note": "nvidia-smi not present"}
    assert report["ecc"]["present"] is False and report["dcgm"]["present"] is False
    assert report["xid"]["readable"] is False
    assert report["services"] == {"munge": "not present", "slurmd": "not present"}
    assert report["fabric"]["kind"] == "efa" and isinstance(report["fabric"]["devices"], int)
    assert report["cpus"] >= 1 and report["memory_mb"] > 0


def _tool(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def test_script_reads_the_tools_it_finds(tmp_path):
    _tool(
        tmp_path,
        "nvidia-smi",
        'case "$1" in\n'
        '  -L) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;\n'
        '  --query-gpu=*) for i in 0 1 2 3 4 5 6 7; do e=0; [ $i = 3 ] && e=2; echo "$i, $e, 5"; done ;;\n'
        '  --query-remapped-rows=*) echo "00000000:18:00.0, No"; echo "00000000:2A:00.0, Yes" ;;\n'
        "esac",
    )
    _tool(
        tmp_path, "dmesg", 'echo "[ 12.0] NVRM: Xid (PCI:0000:2a:00): 79, pid=1, GPU has fallen off the bus."'
    )
    _tool(tmp_path, "systemctl", 'if [ "$2" = munge ]; then echo active; else echo inactive; exit 3; fi')
    _tool(
        tmp_path,
        "dcgmi",
        'echo \'{"DCGM GPU Diagnostic": {"tests": [{"results": [{"status": "Fail"}]}]}}\'',
    )
    report = _run_script("infiniband", str(tmp_path))
    assert report["gpus"]["count"] == 8
    assert report["ecc"]["uncorrected"] == 2 and report["ecc"]["remap_failures"] == 1
    assert report["xid"] == {
        "readable": True,
        "source": "dmesg",
        "count": 1,
        "codes": [79],
        "last": ["[ 12.0] NVRM: Xid (PCI:0000:2a:00): 79, pid=1, GPU has fallen off the bus."],
    }
    assert report["services"] == {"munge": "active", "slurmd": "inactive"}
    assert report["dcgm"]["present"] and report["dcgm"]["passed"] is False
    host = Host(
        name="node-7",
        roles=[Role.COMPUTE],
        address="x",
        private_ip="x",
        instance_type="t",
        gpus=8,
        cpus=1,
        memory_mb=1,
    )
    node = evaluate_node(host, HealthRun(states={}, answers={"node-7": report}, rc=0, stderr=""))
    assert [c.name for c in node.checks if c.status == FAIL] == ["ecc", "ecc", "xid", "dcgm", "slurmd"]


# ---- judging a report against the inventory -------------------------------------------------------


def _host(gpus: int = 8, fabric: int = 32, cpus: int = 96, memory: int = 1000) -> Host:
    return Host(
        name="n1",
        roles=[Role.COMPUTE],
        address="10.0.0.2",
        private_ip="10.0.0.2",
        instance_type="p5.48xlarge",
        gpus=gpus,
        fabric_interfaces=fabric,
        cpus=cpus,
        memory_mb=memory,
    )


def _raw(**overrides) -> dict:
    raw = {
        "hostname": "n1",
        "gpus": {"present": True, "count": 8},
        "ecc": {"present": True, "uncorrected": 0, "per_gpu": []},
        "xid": {"readable": True, "count": 0, "codes": [], "last": []},
        "dcgm": {"present": True, "passed": True},
        "fabric": {"kind": "efa", "devices": 32, "method": "sysfs"},
        "cpus": 192,
        "memory_mb": 2000,
        "services": {"munge": "active", "slurmd": "active"},
    }
    raw.update(overrides)
    return raw


def _judge(raw: dict | None, host: Host | None = None, state: str | None = None):
    states = {"n1": SlurmState("n1", state, "Not responding")} if state else {}
    run = HealthRun(
        states=states, answers={"n1": raw} if raw else {}, rc=1 if raw is None else 0, stderr="boom"
    )
    return evaluate_node(host or _host(), run)


@pytest.mark.parametrize(
    ("raw", "host", "failing"),
    [
        (_raw(), None, []),
        (_raw(gpus={"present": True, "count": 7}), None, ["7 GPUs visible, the inventory expects 8"]),
        (
            _raw(gpus={"present": False, "count": None}),
            None,
            ["nvidia-smi not present, but the inventory expects 8 GPUs"],
        ),
        (
            _raw(gpus={"present": True, "count": None, "error": "NVML failed"}),
            None,
            ["nvidia-smi failed: NVML failed"],
        ),
        (
            _raw(ecc={"present": True, "uncorrected": 4, "per_gpu": [{"gpu": "2", "uncorrected": 4}]}),
            None,
            ["4 uncorrected ECC errors (GPU 2)"],
        ),
        (
            _raw(xid={"readable": True, "codes": [13, 95], "last": ["Xid 95"]}),
            None,
            ["XID 95 in the kernel log (e.g. Xid 95)"],
        ),
        (
            _raw(dcgm={"present": True, "passed": False, "summary": "memory test fail"}),
            None,
            ["DCGM level-1 diagnostic failed: memory test fail"],
        ),
        (
            _raw(fabric={"kind": "efa", "devices": 31, "method": "sysfs"}),
            None,
            ["31 efa devices, the inventory expects 32 (sysfs)"],
        ),
        (
            _raw(cpus=64, memory_mb=500),
            None,
            ["64 CPUs, but the node declares 96 to Slurm", "500 MB of memory, but the node declares 1000 MB"],
        ),
        (_raw(services={"munge": "failed", "slurmd": "active"}), None, ["munge is failed"]),
        # a CPU node: no GPU tools, no fabric expected
        (
            _raw(
                gpus={"present": False},
                ecc={"present": False},
                dcgm={"present": False},
                fabric={"kind": "ethernet", "devices": 1},
            ),
            _host(gpus=0, fabric=0),
            [],
        ),
    ],
)
def test_node_checks(raw, host, failing):
    assert _judge(raw, host).problems == failing


def test_contained_ecc_and_row_remap_recording_warn_without_draining():
    """XID 94 (contained ECC: only the application that hit it is affected) and 63 (a row-remapping entry
    recorded) leave the node in service; NVIDIA GPU Memory Error Management."""
    last = ["NVRM: Xid (PCI:0000:01:00): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"]
    node = _judge(_raw(xid={"readable": True, "codes": [63, 94], "last": last}))
    statuses = {check.name: check.status for check in node.checks}
    assert statuses["xid"] == WARN and node.passed, node.problems


def test_minor_xid_warns_and_missing_tools_inform():
    node = _judge(_raw(xid={"readable": True, "codes": [13]}, dcgm={"present": False}))
    statuses = {check.name: check.status for check in node.checks}
    assert statuses["xid"] == WARN and "dcgm" not in statuses and node.passed
    cpu = _judge(_raw(gpus={"present": False}, xid={"readable": False}), _host(gpus=0))
    statuses = {check.name: check.status for check in cpu.checks}
    assert statuses["gpus"] == INFO and statuses["xid"] == INFO and statuses["fabric"] == PASS


def test_no_answer_and_slurm_state():
    assert _judge(None).problems == ["no health report from the node (srun exit 1): boom"]
    down = _judge(None, state="down*")
    assert down.problems == ["Slurm state down* (Not responding): the node cannot run jobs"]
    assert _judge(_raw(), state="idle").passed


def test_report_json_and_markdown():
    host = _host()
    report = evaluate_health(
        [host],
        HealthRun(states={}, answers={"n1": _raw(gpus={"present": True, "count": 6})}, rc=0, stderr=""),
    )
    data = report.to_json()
    assert data["passed"] is False and data["failed_nodes"] == ["n1"]
    assert json.dumps(data)  # serialisable
    assert "| n1 | **FAIL** | 6 | 32 | 6 GPUs visible, the inventory expects 8 |" in report.markdown()


# ---- the shared filesystem: what the script sees at the mount point, and how it is judged ------------


def test_script_checks_the_mount_point_for_real(tmp_path):
    def run(path: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", node_health_script(), "--fabric", "ethernet", "--mount", path],
            capture_output=True,
            text=True,
            env={"PATH": str(tmp_path), "SLURMD_NODENAME": "node-7"},
            timeout=60,
            check=True,
        )
        return parse_health_output(done.stdout)["node-7"]["mount"]

    plain = run(str(tmp_path))  # a directory, no filesystem of its own
    assert plain == {"path": str(tmp_path), "exists": True, "writable": True, "mounted": False,
                     "fstype": None, "source": None}  # fmt: skip
    assert list(tmp_path.iterdir()) == [], "the probe file was left behind"
    shm = run("/dev/shm/")  # a tmpfs on every Linux host
    assert (shm["mounted"], shm["fstype"], shm["writable"]) == (True, "tmpfs", True), shm
    proc = run("/proc")  # mounted, and not writable
    assert (proc["mounted"], proc["fstype"], proc["writable"]) == (True, "proc", False), proc
    assert proc["error"].startswith(("PermissionError", "OSError", "FileNotFoundError")), proc
    missing = run(str(tmp_path / "absent"))
    assert (missing["exists"], missing["mounted"], missing["writable"]) == (False, False, None), missing


def test_mountinfo_paths_are_unescaped(tmp_path, monkeypatch):
    from gpufleet.node import node_health

    # /proc/self/mountinfo lines (proc(5)); the second mounts /mnt/my data, escaped as \040.
    info = tmp_path / "mountinfo"
    info.write_text(
        "36 35 98:0 / /mnt/fsx rw,relatime shared:1 - autofs systemd-1 rw,fd=45\n"
        "37 36 0:50 / /mnt/fsx rw,noatime - lustre 172.31.4.7@tcp:/abcdefgh rw,flock,lazystatfs\n"
        "38 35 0:51 / /mnt/my\\040data rw - nfs4 10.0.0.2:/vol\\0401 rw,vers=4.1\n"
    )
    real_read = node_health.read

    def read(path):
        return info.read_text() if str(path).endswith("mountinfo") else real_read(path)

    monkeypatch.setattr(node_health, "read", read)
    assert node_health._mounted_at("/mnt/fsx") == {"fstype": "lustre", "source": "172.31.4.7@tcp:/abcdefgh"}
    assert node_health._mounted_at("/mnt/my data") == {"fstype": "nfs4", "source": "10.0.0.2:/vol 1"}
    assert node_health._mounted_at("/mnt") is None


def _mount(**overrides) -> dict:
    mount = {"path": "/fsx", "exists": True, "mounted": True, "fstype": "lustre",
             "source": "172.31.4.7@tcp:/abcdefgh", "writable": True}  # fmt: skip
    mount.update(overrides)
    return mount


FSX = {"kind": "fsx_lustre", "mount_point": "/fsx", "dns_name": "fs-1.fsx", "mount_name": "abcdefgh"}


@pytest.mark.parametrize(
    ("filesystem", "mount", "status", "message"),
    [
        (FSX, _mount(), PASS, "/fsx lustre from 172.31.4.7@tcp:/abcdefgh, writable"),
        (FSX, _mount(mounted=False, fstype=None, source=None), FAIL, "/fsx is not mounted (expected lustre)"),
        (FSX, _mount(mounted=False, fstype="autofs"), FAIL, "/fsx is not mounted (expected lustre)"),
        (FSX, _mount(exists=False, mounted=False), FAIL, "/fsx does not exist (expected lustre)"),
        (FSX, _mount(fstype="ext4", source="/dev/nvme0n1p1"), FAIL,
         "/fsx is ext4 from /dev/nvme0n1p1 (expected lustre)"),
        (FSX, _mount(writable=False, error="no answer from /fsx within 30 s (a hung mount?)"), FAIL,
         "/fsx (lustre) is not writable: no answer from /fsx within 30 s (a hung mount?)"),
        ({"kind": "nfs", "mount_point": "/shared", "server": "nas", "export": "/export"},
         _mount(path="/shared", fstype="nfs4", source="nas:/export"), PASS,
         "/shared nfs4 from nas:/export, writable"),
        ({"kind": "filestore", "mount_point": "/shared", "mount_source": "10.253.0.2:/shared"},
         _mount(path="/shared", fstype="fuse", source="x"), FAIL,
         "/shared is fuse from x (expected nfs/nfs4)"),
        ({"kind": "volume", "mount_point": "/shared"},
         _mount(path="/shared", fstype="ext4", source="/dev/vda[/vol/_data]"), PASS,
         "/shared ext4 from /dev/vda[/vol/_data], writable"),
        (FSX, None, FAIL, "/fsx not checked (expected lustre): the health script did not check it"),
        ({"kind": "none"}, None, None, None),
    ],
)  # fmt: skip
def test_filesystem_judged_against_the_inventory(filesystem, mount, status, message):
    raw = _raw(**({"mount": mount} if mount else {}))
    node = evaluate_node(_host(), HealthRun(states={}, answers={"n1": raw}, rc=0, stderr=""), filesystem)
    found = [check for check in node.checks if check.name == "filesystem"]
    if status is None:
        assert found == []
    else:
        assert [(c.status, c.message) for c in found] == [(status, message)]
        assert node.passed is (status == PASS)


def test_report_shows_the_mount_check():
    volume = {"kind": "volume", "mount_point": "/shared"}
    good = _raw(mount=_mount(path="/shared", fstype="ext4", source="/dev/vda"))
    bad = _raw(mount=_mount(path="/shared", mounted=False, fstype=None, source=None))
    hosts = [_host(), _host().model_copy(update={"name": "n2"})]
    report = evaluate_health(hosts, HealthRun({}, {"n1": good, "n2": bad}, 0, ""), volume)
    markdown = report.markdown()
    assert "Shared filesystem /shared (volume): mounted and writable on 1 of 2 nodes" in markdown
    assert "| n2 | **FAIL** | 8 | 32 | /shared is not mounted (expected volume) |" in markdown
    assert report.to_json()["failed_nodes"] == ["n2"]


def test_health_command_passes_the_mount_point():
    from gpufleet.spec.model import FabricKind
    from gpufleet.validate.slurm import health_command

    with_mount = health_command(["n1"], FabricKind.EFA, script="pass", mount_point="/fsx")
    assert with_mount.endswith("--fabric efa --mount /fsx"), with_mount
    assert "--mount" not in health_command(["n1"], FabricKind.EFA, script="pass")


# ---- the fabric tools' own output, parsed against the inventory's fabric facts --------------------

FABRIC_DATA = Path(__file__).parent / "data" / "fabric"


def _fabric_host(instance_type: str, **fields) -> Host:
    return Host(
        name="n1",
        roles=[Role.COMPUTE],
        address="10.0.0.2",
        private_ip="10.0.0.2",
        instance_type=instance_type,
        gpus=8,
        cpus=96,
        memory_mb=1000,
        **fields,
    )


def test_ibstat_with_a_down_port_fails_the_node():
    raw = _raw(
        fabric={
            "kind": "infiniband",
            "devices": 2,
            "raw": {"ibstat": (FABRIC_DATA / "ibstat-nccl-tests-128-down-port.txt").read_text()},
        }
    )
    host = _fabric_host("dgx-a100", fabric_interfaces=2)  # the catalog gives 200 Gb/s ports
    assert host.fabric_port_gbps == 200
    assert _judge(raw, host).problems == ["ibstat: mlx5_1/1 is Down"]


def test_fi_info_short_of_the_catalog_fails_and_a_match_passes():
    text = (FABRIC_DATA / "fi_info-efa-libfabric-5689.txt").read_text()
    raw = _raw(fabric={"kind": "efa", "devices": 32, "method": "sysfs", "raw": {"fi_info": text}})
    assert _judge(raw, _host()).problems == [
        "fi_info: fi_info -p efa lists 1 EFA device(s) (efa_0), the catalog says 32"
    ]
    one = _judge(dict(raw, fabric={**raw["fabric"], "devices": 1}), _host(fabric=1))
    assert one.passed and any(c.message == "fi_info: as the inventory says" for c in one.checks)


def test_gpu_nics_of_a3_mega_are_checked_by_name_and_mtu():
    text = (FABRIC_DATA / "ip-j-link-local-podman-node.json").read_text()
    raw = _raw(fabric={"kind": "tcpxo", "devices": 8, "raw": {"ip_link": text}})
    host = _fabric_host("a3-megagpu-8g", fabric_interfaces=8)  # NIC names and MTU from the catalog
    problems = _judge(raw, host).problems
    assert problems == [
        "ip link: enp6s0 is missing; enp7s0 is missing; enp13s0 is missing; enp14s0 is missing; "
        "enp134s0 is missing; enp135s0 is missing"
    ]


# ---- the one-rank nccl-tests smoke run ------------------------------------------------------------

NO_DRIVER = Path(__file__).parent / "data" / "nccl-tests-2.19.6-no-driver.log"


def _fake_all_reduce_perf(directory: Path, output: Path, code: int) -> None:
    """Prints ``output`` as the real binary did; refuses to run when Slurm's or PMIx's variables reach it."""
    _tool(
        directory,
        "all_reduce_perf",
        f'if env | grep -q -e "^SLURM_" -e "^PMIX_"; then echo "error: started as an MPI rank"; exit 3; fi\n'
        f"cat {output}; exit {code}",
    )


def test_smoke_run_reports_the_binarys_own_failure(tmp_path):
    _fake_all_reduce_perf(tmp_path, NO_DRIVER, 2)
    done = subprocess.run(
        [sys.executable, "-c", node_health_script(), "--fabric", "ethernet", "--nccl-tests", str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node-7", "SLURM_JOB_ID": "12", "PMIX_RANK": "0"},
        timeout=60,
        check=True,
    )
    smoke = parse_health_output(done.stdout)["node-7"]["nccl_tests"]
    assert smoke["present"] is True and smoke["passed"] is False and smoke["exit"] == 2
    # the binary's first failure line, not the generic "Test failure common.cu" that follows it
    assert "CUDA driver version is insufficient for CUDA runtime version" in smoke["error"]
    host = Host(name="node-7", roles=[Role.COMPUTE], address="x", private_ip="x", instance_type="local",
                cpus=1, memory_mb=1, gpu_stack="install")  # fmt: skip
    report = parse_health_output(done.stdout)["node-7"]
    node = evaluate_node(host, HealthRun(states={}, answers={"node-7": report}, rc=0, stderr=""))
    (smoke_check,) = [c for c in node.checks if c.name == "nccl_tests"]
    assert smoke_check.status == FAIL
    assert smoke_check.message == (
        "nccl-tests all_reduce_perf cannot run one rank (exit 2): node-7: Test CUDA failure util.cu:674 "
        "'CUDA driver version is insufficient for CUDA runtime version'"
    )


def test_smoke_run_outside_slurms_mpi_and_missing_binary(tmp_path):
    ok = tmp_path / "ok.log"
    ok.write_text("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.0 \n")
    _fake_all_reduce_perf(tmp_path, ok, 0)
    report = _run_script_with("--nccl-tests", str(tmp_path))
    assert report["nccl_tests"] == {
        "present": True,
        "binary": f"{tmp_path}/all_reduce_perf",
        "exit": 0,
        "passed": True,
    }
    missing = _run_script_with("--nccl-tests", str(tmp_path / "nowhere"))["nccl_tests"]
    assert missing["present"] is False and "nowhere/all_reduce_perf not present" in missing["note"]
    assert "nccl_tests" not in _run_script_with()  # not asked for: no smoke run


def _run_script_with(*extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", node_health_script(), "--fabric", "ethernet", *extra],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "node-7", "SLURM_JOB_ID": "12"},
        timeout=60,
        check=True,
    )
    return parse_health_output(done.stdout)["node-7"]


def test_a_long_report_travels_in_parts_that_survive_interleaving():
    """srun cuts task output into ~1 KiB pieces; a long report goes out as numbered short parts and is
    joined per host, even when two nodes' parts interleave."""
    from gpufleet.node import node_health
    from gpufleet.validate.slurm import parse_health_output

    reports = [{"hostname": f"n{i}", "note": f"{i}" * 3000} for i in (1, 2)]
    first, second = (node_health.report_lines(r).splitlines() for r in reports)
    assert len(first) == 4 and all(len(line) < 1024 for line in first + second)
    mixed = [line for pair in zip(first, second, strict=True) for line in pair]
    assert parse_health_output("\n".join(mixed)) == {"n1": reports[0], "n2": reports[1]}
    assert parse_health_output("\n".join(first[:-1])) == {}  # a part missing: no report, not a wrong one
    short = {"hostname": "n3", "gpus": {}}
    assert node_health.report_lines(short).startswith("GPUFLEET_HEALTH {")
    assert parse_health_output(node_health.report_lines(short)) == {"n3": short}


# ---- the single-node NVLink floor (Microsoft's aznhc check_nccl_allreduce; catalog node_floors) ----------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
# A real single-process run over 8 H100s (nGpus 8): its 8 GiB row reads 362.55 GB/s out-of-place busbw.
H100X8 = FIXTURES / "06-h100x8-reduce-scatter-zero-size-rows.log"
# A legacy table without the root column: busbw is one column to the left.
LEGACY = FIXTURES / "02-deepops-dgxa100-legacy-error-column.log"


def test_the_busbw_column_is_read_from_the_header():
    from gpufleet.node.node_health import parse_busbw

    assert parse_busbw(H100X8.read_text(), 8589934592) == 362.55
    assert parse_busbw(LEGACY.read_text(), 134217728) == 114.00
    assert parse_busbw(H100X8.read_text(), 17179869184) is None


def test_nd_h100_nodes_run_the_nvlink_all_reduce_against_the_aznhc_floor(tmp_path):
    """The script runs all_reduce_perf over the node's GPUs at the floor's size; the judge fails a node
    below the catalog's floor (460 GB/s for ND H100 v5, 431 for ND H200 v5)."""
    from gpufleet.spec.model import FabricKind
    from gpufleet.validate.judge_health import node_floor
    from gpufleet.validate.slurm import health_command

    host = _fabric_host("Standard_ND96isr_H100_v5", gpu_stack="verify")
    floor = node_floor(host)
    assert floor is not None and (floor.gpus, floor.message_bytes, floor.busbw_gbps) == (
        8,
        8589934592 * 2,
        460,
    )
    command = health_command(
        ["n1"], FabricKind.INFINIBAND, script="pass", nccl_tests_dir="/opt/nt", nvlink=(8, 17)
    )
    assert "--gpus-per-node=8" in command and command.endswith("--nvlink-gpus 8 --nvlink-bytes 17"), command

    size = 8589934592
    _fake_all_reduce_perf(tmp_path, H100X8, 0)
    done = subprocess.run(
        [sys.executable, "-c", node_health_script(), "--fabric", "infiniband", "--nccl-tests", str(tmp_path),
         "--nvlink-gpus", "8", "--nvlink-bytes", str(size)],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "n1"}, timeout=60,
        check=True,
    )  # fmt: skip
    report = parse_health_output(done.stdout)["n1"]
    assert report["nvlink"] == {"present": True, "exit": 0, "gpus": 8, "bytes": size, "busbw_gbps": 362.55}
    node = evaluate_node(host, HealthRun(states={}, answers={"n1": report}, rc=0, stderr=""))
    (check,) = [c for c in node.checks if c.name == "nvlink"]
    assert check.status == FAIL and "362.55 GB/s busbw, below the node floor 460" in check.message, check
    passing = {**report, "nvlink": {**report["nvlink"], "busbw_gbps": 471.2}}
    node = evaluate_node(host, HealthRun(states={}, answers={"n1": passing}, rc=0, stderr=""))
    assert [c.status for c in node.checks if c.name == "nvlink"] == [PASS]
    plain = _fabric_host("p5.48xlarge")
    assert node_floor(plain) is None, "no floor where the catalog has none: nothing is run or judged"


def test_without_systemd_munge_is_found_by_its_daemons_name(tmp_path):
    # No systemctl; pgrep finds munged and slurmd (what a node that starts its daemons without systemd
    # runs: munge.service's ExecStart is munged). Seen on a real H100 machine: munge was reported not
    # running while munged ran, and the node check failed the node.
    _tool(tmp_path, "pgrep", 'case "$2" in munged|slurmd) exit 0 ;; *) exit 1 ;; esac')
    report = _run_script("ethernet", str(tmp_path))
    assert report["services"] == {"munge": "running (no systemd)", "slurmd": "running (no systemd)"}
