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
from gpufleet.validate.health import evaluate_health, evaluate_node
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
            _raw(xid={"readable": True, "codes": [13, 94], "last": ["Xid 94"]}),
            None,
            ["XID 94 in the kernel log (e.g. Xid 94)"],
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
