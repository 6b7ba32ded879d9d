"""The GPU side of the node check: NVIDIA tools' real outputs parsed, the GPU rules, and ``--check`` mode.

The captured outputs under data/gpu/ are unchanged copies of public files (data/gpu/SOURCES.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.inventory.model import Host
from gpufleet.node import node_health
from gpufleet.spec.model import Role
from gpufleet.validate.gate import FAIL, PASS
from gpufleet.validate.judge_health import driver_branch, evaluate_health, evaluate_node, expectations
from gpufleet.validate.slurm import HealthRun, node_health_script

DATA = Path(__file__).parent / "data" / "gpu"


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# ---- parsers on real outputs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("proc-driver-nvidia-version-open-565.txt", {"version": "565.57.01", "branch": 565, "open": True}),
        (
            "proc-driver-nvidia-version-proprietary-384.txt",
            {"version": "384.98", "branch": 384, "open": False},
        ),
        ("proc-driver-nvidia-version-jetson-35.txt", {"version": "35.3.1", "branch": 35, "open": True}),
    ],
)
def test_proc_driver_version(name, expected):
    parsed = node_health.parse_driver_version(_read(name))
    assert parsed is not None and {key: parsed[key] for key in expected} == expected


def test_proc_driver_version_rejects_other_text():
    assert node_health.parse_driver_version("nvidia: module not loaded\n") is None


def test_smi_xml_a100_persistence_off_and_mig_counters_na():
    facts = node_health.parse_smi_xml(_read("nvidia-smi-q-x-a100-sxm4-mig.xml"))
    assert (facts["driver_version"], facts["cuda_version"], facts["attached_gpus"]) == (
        "510.47.03",
        "11.6",
        1,
    )
    (gpu,) = facts["gpus"]
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB" and gpu["bus_id"] == "00000000:00:04.0"
    # MIG mode: volatile counters read N/A (unknown, not zero); the GPU has ECC on and persistence off
    assert (gpu["persistence"], gpu["ecc_enabled"], gpu["uncorrected_volatile"]) == (False, True, None)
    assert gpu["remap_failure"] is None  # <remapped_rows>N/A</remapped_rows>


def test_smi_xml_driver_535_remapped_rows():
    facts = node_health.parse_smi_xml(_read("nvidia-smi-q-x-rtx-4090-driver-535.xml"))
    (gpu,) = facts["gpus"]
    assert facts["driver_version"] == "535.86.05" and gpu["persistence"] is True
    assert (gpu["remap_failure"], gpu["remap_pending"], gpu["ecc_enabled"]) == (False, False, False)


def test_query_csv_with_header_units_and_na():
    rows = node_health.parse_query_csv(_read("nvidia-smi-query-gpu-csv-rtx2080.txt"))
    assert [row["index"] for row in rows] == ["0", "1"]
    first = rows[0]
    assert first["name"] == "NVIDIA GeForce RTX 2080 SUPER" and first["driver_version"] == "466.63"
    assert first["fan.speed"] == "38 %" and first["serial"] is None and first["compute_cap"] == "7.5"


def test_query_csv_without_header():
    rows = node_health.parse_query_csv("0, Enabled\n1, Disabled\n", ["index", "persistence_mode"])
    assert rows == [
        {"index": "0", "persistence_mode": "Enabled"},
        {"index": "1", "persistence_mode": "Disabled"},
    ]


def test_dcgm_diag_pass_and_fail():
    passed = node_health.parse_dcgm_diag(_read("dcgmi-diag-r1-j-dcgm3-pass.json"))
    assert passed is not None and passed["passed"] and len(passed["tests"]) == 9
    failed = node_health.parse_dcgm_diag(_read("dcgmi-diag-r1-j-dcgm3-persistence-fail.json"))
    assert failed is not None and not failed["passed"]
    assert (failed["failed"], failed["warned"]) == (["Persistence Mode"], ["Environment Variables"])


# What DCGM's own tests require of ``dcgmi diag -j`` in 4.x (its JSON schema, read 2026-11-27:
# NVIDIA/DCGM@686e1024ada28a42d10df597f15247145eef6ce2:testing/python3/dcgm_diag_schema.json), written here
# as the required keys per level; the 4.x document under data/gpu/ is held to it.
DCGM4_REQUIRED = {
    "document": ("DCGM Diagnostic",),
    "category": ("category", "tests"),
    "test": ("name", "results", "test_summary"),
    "result": ("entity_group", "entity_group_id", "entity_id", "status"),
    "warning": ("error_category", "error_id", "error_severity", "warning"),
    "entity_group": ("entities", "entity_group", "entity_group_id"),
    "entity": ("device_id", "entity_id"),
}


def _dcgm4_shape_problems(doc: dict) -> list[str]:
    problems: list[str] = []

    def need(what: str, item: dict, where: str) -> None:
        problems.extend(f"{where}: no {key!r}" for key in DCGM4_REQUIRED[what] if key not in item)

    need("document", doc, "document")
    for c, category in enumerate(doc.get("DCGM Diagnostic", {}).get("test_categories", [])):
        need("category", category, f"category {c}")
        for test in category.get("tests", []):
            need("test", test, f"test {test.get('name')}")
            if "status" not in test.get("test_summary", {}):
                problems.append(f"test {test.get('name')}: test_summary has no status")
            for result in test.get("results", []):
                need("result", result, f"test {test.get('name')} result")
                for warning in result.get("warnings", []):
                    need("warning", warning, f"test {test.get('name')} warning")
    for group in doc.get("entity_groups", []):
        need("entity_group", group, "entity group")
        for entity in group.get("entities", []):
            need("entity", entity, "entity")
    if "version" not in doc.get("metadata", {"version": None}):
        problems.append("metadata: no 'version'")
    return problems


def test_dcgm_diag_4x_document_of_dcgms_schema_fails_on_its_test_summary():
    text = _read("dcgmi-diag-r2-j-dcgm4-memory-fail.json")
    assert _dcgm4_shape_problems(json.loads(text)) == []
    parsed = node_health.parse_dcgm_diag(text)
    assert parsed is not None and not parsed["passed"]
    assert (parsed["failed"], parsed["warned"]) == (["memory"], ["pcie"])
    assert parsed["tests"] == {"software": "Pass", "pcie": "Warn", "memory": "Fail"}
    assert node_health.parse_dcgm_diag("Error: unable to connect to host engine") is None


def test_the_dcgm4_shape_check_refuses_a_document_without_dcgms_required_keys():
    doc = json.loads(_read("dcgmi-diag-r2-j-dcgm4-memory-fail.json"))
    del doc["DCGM Diagnostic"]["test_categories"][2]["tests"][0]["test_summary"]
    del doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["entity_id"]
    assert _dcgm4_shape_problems(doc) == [
        "test software result: no 'entity_id'",
        "test memory: no 'test_summary'",
        "test memory: test_summary has no status",
    ]


# ---- the GPU rules --------------------------------------------------------------------------------


def _host(nvswitch: bool = True) -> Host:
    return Host(
        name="n1", roles=[Role.COMPUTE], address="a", private_ip="a", instance_type="p5.48xlarge",
        gpus=8, nvswitch=nvswitch, cpus=1, memory_mb=1,
    )  # fmt: skip


def _raw(**changes) -> dict:
    raw = {
        "gpus": {"present": True, "count": 8},
        "persistence": {"present": True, "disabled": [], "gpus": 8},
        "fabricmanager": "active",
        "driver": {"present": True, "version": "580.95.05", "branch": 580, "open": True},
        "fabric": {"kind": "efa", "devices": 32, "method": "sysfs"},  # p5: the catalog's 32 EFA
        "services": {"munge": "active", "slurmd": "active"},
    }
    raw.update(changes)
    return raw


@pytest.mark.parametrize(
    ("changes", "nvswitch", "failing"),
    [
        ({}, True, []),
        (
            {"persistence": {"present": True, "disabled": ["0", "3"], "gpus": 8}},
            True,
            [
                "persistence mode off on GPU 0, 3: start nvidia-persistenced "
                "(systemctl enable --now nvidia-persistenced)"
            ],
        ),
        (
            {"fabricmanager": "failed"},
            True,
            [
                "nvidia-fabricmanager is failed on an NVSwitch node: CUDA cannot use the GPUs until it runs "
                "(systemctl enable --now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager)"
            ],
        ),
        ({"fabricmanager": "inactive"}, False, []),  # no NVSwitch (g5): fabric manager not needed
    ],
)
def test_gpu_rules(changes, nvswitch, failing):
    node = evaluate_node(
        _host(nvswitch), HealthRun(states={}, answers={"n1": _raw(**changes)}, rc=0, stderr="")
    )
    assert node.problems == failing


def test_driver_branch_below_the_pin_fails_with_the_fix():
    raw = _raw(driver={"present": True, "version": "535.104.05", "branch": 535, "open": False})
    checks = node_health.judge(raw, expectations(_host(), driver_branch=580))
    driver = [c for c in checks if c[0] == "driver"]
    assert driver == [
        (
            "driver",
            FAIL,
            "driver 535.104.05 is older than the pinned branch 580: install a newer driver (or an image that "
            "carries one) and reboot",
        )
    ]
    ok = node_health.judge(_raw(), expectations(_host(), driver_branch=580))
    assert ("driver", PASS, "driver 580.95.05 (open)") in ok


# ---- --check mode, as Slurm and the validate step run it -----------------------------------------------


def _tool(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def _fake_node(tmp_path: Path, *, gpus: int, persistence_off: tuple[int, ...] = ()) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rows = "".join(f'echo "{i}, {"Disabled" if i in persistence_off else "Enabled"}"; ' for i in range(gpus))
    _tool(
        bin_dir,
        "nvidia-smi",
        'case "$1" in\n'
        f'  -L) i=0; while [ $i -lt {gpus} ]; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; '
        "i=$((i+1)); done ;;\n"
        f"  --query-gpu=index,persistence_mode) {rows};;\n"
        '  --query-gpu=*) i=0; while [ $i -lt %d ]; do echo "$i, 0, 0"; i=$((i+1)); done ;;\n'
        % gpus
        + "esac",
    )
    _tool(bin_dir, "systemctl", "echo active")
    _tool(bin_dir, "scontrol", f'echo "$@" > {tmp_path}/drained')
    return bin_dir


def _check(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", node_health_script(), "--check", "--skip", "dcgm,xid,fabric", *args],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), "SLURMD_NODENAME": "gpu-3"},
        timeout=60,
        check=False,
    )


def test_check_mode_passes_a_healthy_node(tmp_path):
    expect = tmp_path / "node-check.json"
    expect.write_text(json.dumps({"gpus": 8, "nvswitch": True, "cpus": 1, "memory_mb": 1}))
    done = _check(_fake_node(tmp_path, gpus=8), "--expect", str(expect))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("gpufleet-node-check: OK gpu-3: 8 GPUs;")
    assert "nvidia-fabricmanager active" in done.stdout and "persistence mode on" in done.stdout


def test_check_mode_fails_drains_and_names_the_reason(tmp_path):
    done = _check(_fake_node(tmp_path, gpus=7, persistence_off=(2,)), "--gpus", "8", "--drain")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        "gpufleet-node-check: FAIL gpu-3: 7 GPUs visible, the inventory expects 8; persistence mode off on "
        "GPU 2: start nvidia-persistenced (systemctl enable --now nvidia-persistenced)"
    )
    drained = (tmp_path / "drained").read_text().strip()
    reason = "reason=gpufleet-node-check: 7 GPUs visible, the inventory expects 8"
    assert drained == f"update nodename=gpu-3 state=drain {reason}"


def test_validate_judges_the_loaded_driver_against_the_inventory_software():
    assert [driver_branch(s) for s in ({"nvidia_driver": "580"}, {"nvidia_driver": "570.86.15"}, {})] == [
        580,
        570,
        None,
    ]
    raw = _raw(driver={"present": True, "version": "570.86.15", "branch": 570, "open": True})
    run = HealthRun(states={}, answers={"n1": raw}, rc=0, stderr="")
    report = evaluate_health([_host()], run, driver_branch=driver_branch({"nvidia_driver": "580"}))
    assert report.failed_nodes == ["n1"]
    assert report.nodes[0].problems[0].startswith("driver 570.86.15 is older than the pinned branch 580")


# ---- NVLSM on fourth-generation NVSwitch (HGX B200/B300) ---------------------------------------------------


def _b200(instance_type: str = "p6-b200.48xlarge", gpus: int = 8, arch: str = "sm_100") -> Host:
    return Host(
        name="n1", roles=[Role.COMPUTE], address="a", private_ip="a", instance_type=instance_type,
        gpus=gpus, gpu_arch=arch, nvswitch=True, cpus=1, memory_mb=1,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("host", "nvlsm", "failing"),
    [
        (_b200(), "running", []),
        (
            _b200(),
            "not running",
            [
                "nvlsm is not running on a fourth-generation NVSwitch node: the GPUs cannot join the NVLink "
                "fabric without it (install nvlink5-<driver branch>, then systemctl restart "
                "nvidia-fabricmanager; journalctl -u nvidia-fabricmanager)"
            ],
        ),
        (_b200("p6-b300.48xlarge", arch="sm_103"), None, ["nvlsm is not present on a fourth-generation"]),
        (_host(), None, []),  # H100: third-generation NVSwitch, no NVLSM
        (_b200("p6e-gb200.36xlarge", gpus=4), None, []),  # GB200 NVL72 tray: the switches are elsewhere
    ],
    ids=["b200-running", "b200-stopped", "b300-absent", "h100", "gb200-tray"],
)
def test_nvlsm_is_required_on_fourth_generation_nvswitch_only(host, nvlsm, failing):
    raw = _raw() if nvlsm is None else _raw(nvlsm=nvlsm)
    node = evaluate_node(host, HealthRun(states={}, answers={"n1": raw}, rc=0, stderr=""))
    assert [p[: len(f)] for p, f in zip(node.problems, failing, strict=False)] == failing, node.problems
    assert len(node.problems) == len(failing), node.problems


def test_check_mode_looks_for_the_nvlsm_process(tmp_path):
    bin_dir = _fake_node(tmp_path, gpus=8)
    expect = tmp_path / "node-check.json"
    expect.write_text(json.dumps({"gpus": 8, "nvswitch": True, "cpus": 1, "memory_mb": 1}))
    missing = _check(bin_dir, "--expect", str(expect), "--nvlsm")
    assert missing.returncode == 1 and "nvlsm is not present" in missing.stdout, missing.stdout
    _tool(bin_dir, "pgrep", '[ "$2" = nvlsm ]')
    running = _check(bin_dir, "--expect", str(expect), "--nvlsm")
    assert running.returncode == 0 and "nvlsm running" in running.stdout, running.stdout + running.stderr
