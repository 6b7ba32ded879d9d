#!/usr/bin/env python3
"""Per-node health check, run on every compute node by the validation suite (``srun ... python3 -c``).

Standalone on purpose: the standard library only, Python 3.8+, no gpufleet import, so that it runs on
any node image. It prints one line, ``GPUFLEET_HEALTH {json}``, and always exits 0: whatever is missing
on the node (no GPU, no nvidia-smi, no dcgmi, dmesg not readable) is reported as "not present" or "not
readable", never as a crash. The suite compares the line with the inventory's expectations.

Reported: hostname and Slurm node name; GPUs (``nvidia-smi -L``); ECC error counts and remapped-row failures
(``nvidia-smi --query-gpu``); XID errors (``dmesg``, else ``journalctl -k``); the DCGM level-1 diagnostic
when ``dcgmi`` exists; fabric devices (EFA: /sys/class/infiniband devices bound to the efa driver, or
``fi_info -p efa``; InfiniBand/RoCE: /sys/class/infiniband ports that are ACTIVE with the right link layer;
TCPX/TCPXO: gVNIC interfaces other than the one with the default route), with the raw output of ``fi_info``
/ ``ibstat`` / ``ip -j link`` for the suite to parse; CPU count and memory; the munge and slurmd services;
persistence mode per GPU (``nvidia-smi --query-gpu``); the loaded driver (``/proc/driver/nvidia/version``);
the nvidia-fabricmanager service, and the nvlsm process it starts on fourth-generation NVSwitch (HGX
B200/B300); with ``--nccl-tests DIR``, a one-rank smoke run of ``DIR/all_reduce_perf`` (8 bytes, one
iteration) started as its own process, outside Slurm's MPI, so a node whose CUDA, NCCL or driver cannot run
the binaries says why (e.g. "CUDA driver version is insufficient for CUDA runtime version"); with
``--nvlink-gpus N --nvlink-bytes B`` too, an all_reduce over the node's N GPUs in one process at B bytes
(NVLink only), judged against the type's node floor (Microsoft's aznhc check_nccl_allreduce; catalog
``node_floors``); with ``--env-file PATH``, whether the NCCL environment file every rank sources is there
(ready before measured, issue 33); on InfiniBand/RoCE, whether ``nvidia_peermem`` is loaded; with
``--mount PATH``, the shared filesystem there: mounted or not, its type and source
(``/proc/self/mountinfo``), and whether a file can be written and removed (in a thread with a deadline, so a
hung network filesystem is reported, not waited on forever).

``--skip KEY,...`` leaves checks out (a Kubernetes pod skips ``services``); in a pod, the node's name comes
from ``GPUFLEET_NODE_NAME`` and DCGM's host engine from ``GPUFLEET_DCGM_HOST`` (``validate.kubernetes``).

The rules that turn a report into a verdict live here too (``judge``), so that the node itself and gpufleet
judge alike: ``validate/judge_health.py`` (what ``gpufleet validate`` shows) calls ``judge``, and the same
file, installed on every GPU node by the ``gpu_health`` role as ``/usr/local/sbin/gpufleet-node-check``, runs
with ``--check``: it reads what the node should have from ``/etc/gpufleet/node-check.json`` (written from the
inventory), prints one line (``OK ...`` or ``FAIL <reason>``) and exits 1 on a failure; with ``--drain`` it
also drains the node in Slurm with that reason (Slurm's HealthCheckProgram).

The parsers of NVIDIA's tools' output (``parse_*``) are tested against real captured outputs
(tests/validate/data/gpu/SOURCES.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

MARKER = "GPUFLEET_HEALTH "
XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")
# XIDs that mean the hardware (not the application) is in trouble: double-bit ECC, a row remapping that
# failed, NVLink, fallen off the bus, uncontained errors, GSP failures (NVIDIA's XID catalog). Not 63 or 94
# (they warn): NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt, "Error
# Containment" and "User Visible Statistics", read 2026-11-24): XID 94 is a contained ECC error, whose impact
# "will be limited to the applications that encounter the error ... new workloads can be launched", with no
# GPU reset; XID 63 records a row-remapping entry in the InfoROM (the page is offlined meanwhile), and
# XID 64, a failed recording, stays serious, as does the row-remapping failure the ECC check reads.
SERIOUS_XIDS = frozenset({48, 61, 62, 64, 74, 79, 92, 95, 119, 120, 140})
EXPECT_FILE = "/etc/gpufleet/node-check.json"
PASS, FAIL, WARN, INFO = "pass", "fail", "warn", "info"
_VERSION = re.compile(
    r"NVRM version: NVIDIA UNIX (?:Open Kernel Module for (?P<arch>\S+)|(?P<parch>\S+) Kernel Module)"
    r"\s+(?P<version>\d+(?:\.\d+)+)"
)
_NA = ("N/A", "[N/A]", "[Not Supported]", "Not Supported", "")


def run(argv: list[str], timeout: float = 60.0, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command; (exit code, stdout+stderr). 127 when the tool is not installed, 124 on timeout."""
    if shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
        return 127, ""
    try:
        done = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired:
        return 124, ""
    except OSError as exc:
        return 126, str(exc)
    return done.returncode, done.stdout.decode("utf-8", "replace")


def read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


# ---- parsers of NVIDIA's tools ------------------------------------------------------------------


def _value(text: str | None) -> str | None:
    text = (text or "").strip()
    return None if text in _NA else text


def _yes(text: str | None) -> bool | None:
    """``Yes`` or ``No`` as a bool; None where nvidia-smi reports nothing."""
    value = _value(text)
    return None if value is None else value == "Yes"


def _count(text: str | None) -> int | None:
    value = _value(text)
    return int(value) if value is not None and value.isdigit() else None


def parse_driver_version(text: str) -> dict[str, object] | None:
    """``/proc/driver/nvidia/version``: the loaded kernel module's version, branch and flavour."""
    match = _VERSION.search(text or "")
    if match is None:
        return None
    version = match.group("version")
    return {
        "version": version,
        "branch": int(version.split(".")[0]),
        "open": match.group("arch") is not None,
        "arch": match.group("arch") or match.group("parch"),
    }


def parse_query_csv(text: str, fields: list[str] | None = None) -> list[dict[str, str | None]]:
    """``nvidia-smi --query-gpu=... --format=csv`` (header row) or ``csv,noheader`` with ``fields``.

    Keys are the query names without the unit nvidia-smi appends to the header (``fan.speed [%]``);
    values are stripped, ``N/A`` / ``[N/A]`` / ``[Not Supported]`` become None.
    """
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if fields is None:
        if not lines:
            return []
        fields = [name.split(" [")[0].strip() for name in lines[0].split(",")]
        lines = lines[1:]
    rows = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == len(fields):
            rows.append({fields[i]: _value(parts[i]) for i in range(len(fields))})
    return rows


def _ecc_uncorrected(gpu: ET.Element) -> int | None:
    """Volatile uncorrected ECC errors: dram+sram (Ampere and later) or the older total."""
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return None
    counts = [_count(volatile.findtext(tag)) for tag in ("dram_uncorrectable", "sram_uncorrectable")]
    known = [count for count in counts if count is not None]
    if known:
        return sum(known)
    return _count(volatile.findtext("double_bit/total"))


def parse_smi_xml(text: str) -> dict[str, object]:
    """``nvidia-smi -q -x``: driver and CUDA version, and per GPU what the health check judges."""
    root = ET.fromstring(text)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        remap = gpu.find("remapped_rows")
        failure = remap.findtext("remapped_row_failure") if remap is not None else None
        pending = remap.findtext("remapped_row_pending") if remap is not None else None
        gpus.append(
            {
                "index": index,
                "name": _value(gpu.findtext("product_name")),
                "bus_id": gpu.get("id"),
                "persistence": {"Enabled": True, "Disabled": False}.get(
                    (gpu.findtext("persistence_mode") or "").strip()
                ),
                "ecc_enabled": {"Enabled": True, "Disabled": False}.get(
                    (gpu.findtext("ecc_mode/current_ecc") or "").strip()
                ),
                "uncorrected_volatile": _ecc_uncorrected(gpu),
                "remap_failure": _yes(failure),
                "remap_pending": _yes(pending),
            }
        )
    attached = _count(root.findtext("attached_gpus"))
    return {
        "driver_version": _value(root.findtext("driver_version")),
        "cuda_version": _value(root.findtext("cuda_version")),
        "attached_gpus": attached if attached is not None else len(gpus),
        "gpus": gpus,
    }


def _test_status(test: dict) -> str:
    summary = test.get("test_summary")
    if isinstance(summary, dict) and summary.get("status"):
        return str(summary["status"])
    statuses = [str(r.get("status", "")) for r in test.get("results") or [] if isinstance(r, dict)]
    for word in ("fail", "warn", "pass"):
        if any(status.lower() == word for status in statuses):
            return word.capitalize()
    return statuses[0] if statuses else "Skip"


def parse_dcgm_diag(text: str) -> dict[str, object] | None:
    """``dcgmi diag -r N -j`` (DCGM 3.x "DCGM GPU Diagnostic" and 4.x "DCGM Diagnostic" shapes)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    body = data.get("DCGM Diagnostic") or data.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        return None
    tests = {}
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            tests[str(test.get("name"))] = _test_status(test)
    failed = [name for name, status in tests.items() if status.lower() == "fail"]
    return {
        "tests": tests,
        "failed": failed,
        "warned": [name for name, status in tests.items() if status.lower() == "warn"],
        "passed": bool(tests) and not failed,
    }


def gpus() -> dict[str, object]:
    rc, out = run(["nvidia-smi", "-L"])
    if rc == 127:
        return {"present": False, "count": None, "note": "nvidia-smi not present"}
    if rc != 0:
        return {"present": True, "count": None, "error": out.strip()[-300:] or f"nvidia-smi -L exit {rc}"}
    names = [line.strip() for line in out.splitlines() if line.startswith("GPU ")]
    return {"present": True, "count": len(names), "names": names}


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def ecc() -> dict[str, object]:
    fields = "index,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total"
    rc, out = run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    if rc == 127:
        return {"present": False, "note": "nvidia-smi not present"}
    if rc != 0:
        return {"present": True, "error": out.strip()[-300:]}
    per_gpu: list[dict[str, object]] = []
    uncorrected: list[int] = []
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            errors = _int_or_none(parts[1])
            per_gpu.append({"gpu": parts[0], "uncorrected": errors, "corrected": _int_or_none(parts[2])})
            if errors is not None:
                uncorrected.append(errors)
    result: dict[str, object] = {
        "present": True,
        "uncorrected": sum(uncorrected) if uncorrected else None,  # None: ECC off or not reported
        "per_gpu": per_gpu,
    }
    rc, out = run(
        ["nvidia-smi", "--query-remapped-rows=gpu_bus_id,remapped_rows.failure", "--format=csv,noheader"]
    )
    if rc == 0:
        result["remap_failures"] = sum(1 for line in out.splitlines() if line.strip().lower().endswith("yes"))
    return result


def xids() -> dict[str, object]:
    for argv in (["dmesg"], ["journalctl", "-k", "--no-pager", "-q", "-o", "cat"]):
        rc, out = run(argv, timeout=30)
        if rc == 0 and out:
            found = XID.findall(out)
            lines = [line.strip() for line in out.splitlines() if "NVRM: Xid" in line]
            return {
                "readable": True,
                "source": argv[0],
                "count": len(found),
                "codes": sorted({int(code) for _, code in found}),
                "last": lines[-3:],
            }
    return {"readable": False, "note": "dmesg / journalctl -k not readable here"}


def dcgm() -> dict[str, object]:
    # In a pod, the GPU Operator's DCGM host engine on the node's address (GPUFLEET_DCGM_HOST, set by
    # validate.kubernetes where the operator runs one), else dcgmi's own default (the local host engine).
    host = os.environ.get("GPUFLEET_DCGM_HOST")
    rc, out = run(["dcgmi", "diag", "-r", "1", "-j", *(["--host", host] if host else [])], timeout=600)
    if rc == 127:
        return {"present": False, "note": "dcgmi not present"}
    text = out.strip()
    parsed = parse_dcgm_diag(text)
    failed = rc != 0 or '"Fail"' in text or '"fail"' in text or bool(parsed and parsed["failed"])
    if parsed and parsed["failed"]:
        # parse_dcgm_diag's "failed" is its list of failed test names (the document is dict[str, object]).
        summary = "failed: " + ", ".join(parsed["failed"])  # type: ignore[arg-type]
    elif parsed is None:
        summary = text[-400:]
    else:
        summary = json.dumps(json.loads(text))[:400]
    return {"present": True, "passed": not failed, "exit": rc, "summary": summary}


def persistence() -> dict[str, object]:
    rc, out = run(["nvidia-smi", "--query-gpu=index,persistence_mode", "--format=csv,noheader"])
    if rc == 127:
        return {"present": False, "note": "nvidia-smi not present"}
    if rc != 0:
        return {"present": True, "error": out.strip()[-300:]}
    rows = parse_query_csv(out, ["index", "persistence_mode"])
    modes = {
        index: row["persistence_mode"]
        for row in rows
        if (index := row["index"]) is not None and row["persistence_mode"] in ("Enabled", "Disabled")
    }
    return {
        "present": True,
        "disabled": sorted(i for i, m in modes.items() if m == "Disabled"),
        "gpus": len(modes),
    }


def driver() -> dict[str, object]:
    text = read("/proc/driver/nvidia/version")
    if text is None:
        return {"present": False, "note": "no NVIDIA kernel module loaded"}
    parsed = parse_driver_version(text)
    return {"present": True, **parsed} if parsed else {"present": True, "error": text[:200]}


def _driver(path: Path) -> str:
    link = path / "device" / "driver"
    return link.resolve().name if link.exists() else ""


def _listdir(path: str | Path) -> list[str]:
    try:
        return sorted(entry.name for entry in Path(path).iterdir())
    except OSError:
        return []


def _default_route_interface() -> str | None:
    text = read("/proc/net/route") or ""
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 2 and parts[1] == "00000000":
            return parts[0]
    return None


# The tools whose output the suite parses (gpufleet.validate.fabric_facts), by fabric.
RAW_TOOLS = {
    "efa": {"fi_info": ["fi_info", "-p", "efa", "-t", "FI_EP_RDM"]},
    "infiniband": {"ibstat": ["ibstat"]},
    "roce": {"ibstat": ["ibstat"], "ip_link": ["ip", "-j", "link", "show"]},
    "tcpx": {"ip_link": ["ip", "-j", "link", "show"]},
    "tcpxo": {"ip_link": ["ip", "-j", "link", "show"]},
}
RAW_LIMIT = 200_000


def fabric_raw(kind: str) -> dict[str, str]:
    """The fabric tools' own output, for the suite to parse; a tool that is absent or fails is left out."""
    raw = {}
    for key, argv in RAW_TOOLS.get(kind, {}).items():
        if argv[0] == "fi_info" and shutil.which("fi_info") is None:
            argv = ["/opt/amazon/efa/bin/fi_info", *argv[1:]]
        rc, out = run(argv)
        if rc == 0 and out:
            raw[key] = out[:RAW_LIMIT]
    return raw


def fabric(kind: str) -> dict[str, object]:
    result = _fabric_devices(kind)
    result["raw"] = fabric_raw(kind)
    return result


def _fabric_devices(kind: str) -> dict[str, object]:
    ib_root = Path("/sys/class/infiniband")
    if kind == "efa":
        names = [name for name in _listdir(ib_root) if _driver(ib_root / name) == "efa"]
        method = "/sys/class/infiniband (efa driver)"
        if not names:
            rc, out = run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"])
            if rc == 0:
                names = sorted(set(re.findall(r"domain:\s*(\S+)", out)))
                method = "fi_info -p efa"
        return {"kind": kind, "devices": len(names), "names": names, "method": method}
    if kind in ("infiniband", "roce"):
        layer = "InfiniBand" if kind == "infiniband" else "Ethernet"
        names, active = [], []
        for name in _listdir(ib_root):
            ports = ib_root / name / "ports"
            for port in _listdir(ports):
                if (read(ports / port / "link_layer") or "") != layer:
                    continue
                names.append(name)
                if "ACTIVE" in (read(ports / port / "state") or ""):
                    active.append(f"{name}:{port}")
        return {
            "kind": kind,
            "devices": len(active),
            "names": active,
            "inactive": sorted(set(names) - {item.split(":")[0] for item in active}),
            "method": f"/sys/class/infiniband ports ACTIVE, link layer {layer}",
        }
    if kind in ("tcpx", "tcpxo"):
        host_nic = _default_route_interface()
        names = [
            name
            for name in _listdir("/sys/class/net")
            if name != host_nic and _driver(Path("/sys/class/net") / name) == "gve"
        ]
        return {
            "kind": kind,
            "devices": len(names),
            "names": names,
            "method": "gVNIC interfaces but the host NIC",
        }
    names = [name for name in _listdir("/sys/class/net") if name != "lo"]
    return {"kind": kind, "devices": len(names), "names": names, "method": "network interfaces"}


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounted_at(path: str) -> dict[str, str] | None:
    """The filesystem mounted last at ``path`` (the one a process sees), from /proc/self/mountinfo."""
    found = None
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 5 and len(rest) >= 2 and _unescape(fields[4]) == path:
            found = {"fstype": rest[0], "source": _unescape(rest[1])}
    return found


def _probe(path: str, result: dict[str, object]) -> None:
    """Does ``path`` exist, and can a file be written, flushed and removed there? Fills ``result``."""
    result["exists"] = Path(path).is_dir()  # a stat of a hung mount blocks: so this runs in the thread too
    if not result["exists"]:
        return
    probe = Path(path) / f".gpufleet-health-{socket.gethostname()}-{os.getpid()}"
    try:
        with probe.open("w", encoding="utf-8") as handle:
            handle.write("gpufleet health probe\n")
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
        result["writable"] = True
    except OSError as exc:
        result["writable"] = False
        result["error"] = f"{type(exc).__name__}: {exc.strerror or exc}"


def mount(path: str, timeout: float = 30.0) -> dict[str, object]:
    path = os.path.normpath(path)
    result: dict[str, object] = {"path": path, "exists": None, "writable": None}
    worker = threading.Thread(target=_probe, args=(path, result), daemon=True)
    worker.start()  # before reading mountinfo: touching the path triggers an automount
    worker.join(timeout)
    if worker.is_alive():
        result["writable"] = False
        result["error"] = f"no answer from {path} within {timeout:.0f} s (a hung mount?)"
    seen = _mounted_at(path)
    result["mounted"] = seen is not None and seen["fstype"] != "autofs"
    result["fstype"] = seen["fstype"] if seen else None
    result["source"] = seen["source"] if seen else None
    return result


NCCL_TESTS_SMOKE = ["-b", "8", "-e", "8", "-g", "1", "-n", "1", "-w", "0"]
_FAILURE = re.compile(r"(failure|error|insufficient|not found|cannot)", re.IGNORECASE)


def nccl_tests(bindir: str) -> dict[str, object]:
    """One rank of all_reduce_perf on this node's GPU 0: does the installed stack run at all?"""
    binary = Path(bindir) / "all_reduce_perf"
    if not binary.is_file():
        return {"present": False, "binary": str(binary), "note": f"{binary} not present"}
    # A singleton MPI process: without Slurm's or PMIx's variables, Open MPI does not look for a launcher.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM_", "PMIX_", "PMI_", "OMPI_"))
    }
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    rc, out = run([str(binary), *NCCL_TESTS_SMOKE], timeout=120, env=env)
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    failures = [line for line in lines if _FAILURE.search(line) and not line.startswith("#")]
    passed = rc == 0 and any("Out of bounds values : 0 OK" in line for line in lines)
    result: dict[str, object] = {"present": True, "binary": str(binary), "exit": rc, "passed": passed}
    if not passed:
        result["error"] = (failures[0] if failures else (lines[-1] if lines else "no output"))[:300]
    return result


# The single-node NVLink all_reduce of a cloud's own node health check (Microsoft's aznhc
# check_nccl_allreduce: all GPUs of the node, 16G, busbw against a per-size floor; the catalog's node_floors).
NVLINK_ITERATIONS = ["-n", "20", "-w", "5"]


def nvlink_allreduce(bindir: str, gpus: int, size: int) -> dict[str, object]:
    """all_reduce_perf over every GPU of this node in one process (NVLink only), at ``size`` bytes: its
    out-of-place bus bandwidth, as nccl-tests prints it (column 8 of the row of that size)."""
    binary = Path(bindir) / "all_reduce_perf"
    if not binary.is_file():
        return {"present": False, "binary": str(binary), "note": f"{binary} not present"}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SLURM_", "PMIX_", "PMI_", "OMPI_"))
    }
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    argv = [str(binary), "-b", str(size), "-e", str(size), "-g", str(gpus), *NVLINK_ITERATIONS]
    rc, out = run(argv, timeout=900, env=env)
    result: dict[str, object] = {"present": True, "exit": rc, "gpus": gpus, "bytes": size}
    busbw = parse_busbw(out, size)
    if busbw is None:
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        failures = [line for line in lines if _FAILURE.search(line) and not line.startswith("#")]
        result["error"] = (failures[0] if failures else (lines[-1] if lines else "no output"))[:300]
    else:
        result["busbw_gbps"] = busbw
    return result


def parse_busbw(text: str, size: int) -> float | None:
    """The out-of-place busbw of the row of ``size`` bytes in nccl-tests' table, or None. The column is
    found by the header ("size count type redop root time algbw busbw ..."; builds before the root column
    have one column fewer)."""
    column = 7
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["#"] and "size" in fields and "busbw" in fields:
            column = fields.index("busbw") - 1  # the header's fields start with "#"
        elif len(fields) > column and fields[0] == str(size):
            try:
                return float(fields[column])
            except ValueError:
                return None
    return None


def memory_mb() -> int | None:
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    except OSError:
        return os.cpu_count()


_UNIT_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading")


# The daemon each checked service runs, where its process is not named as its unit: munge.service starts
# munged (munge's own src/munged; Debian's and Ubuntu's munge.service ExecStart=/usr/sbin/munged).
_DAEMONS = {"munge": "munged"}


def service(name: str) -> str:
    """systemd's view of a service, else whether its daemon's process runs; 'not present' if neither.

    Without systemd (a node image that runs its daemons another way, a container) the daemon's process
    name is looked for: munge's is munged (seen on a real H100 machine without systemd, 2026-11-27: munged
    ran and the check said munge was not running).
    """
    rc, out = run(["systemctl", "is-active", name], timeout=15)
    state = out.strip().splitlines()[0] if out.strip() else ""
    if state in _UNIT_STATES:
        return state
    rc, _ = run(["pgrep", "-x", _DAEMONS.get(name, name)], timeout=15)
    if rc == 127:
        return "not present"
    return "running (no systemd)" if rc == 0 else "not running"


def process(name: str) -> str:
    """Whether a process of exactly that name runs (NVLSM has no unit of its own: nvidia-fabricmanager's
    unit starts it on fourth-generation NVSwitch systems)."""
    rc, _ = run(["pgrep", "-x", name], timeout=15)
    if rc == 127:
        return "not present"
    return "running" if rc == 0 else "not running"


# ---- judging ---------------------------------------------------------------------------------------
# A check is (name, status, message); status is pass, fail, warn or info. ``expect`` holds what the
# inventory says the node has: gpus, fabric_interfaces, cpus, memory_mb, nvswitch, nvlsm, driver_branch.


def _judge_gpus(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    gpus, want = raw.get("gpus") or {}, int(expect.get("gpus") or 0)
    if not gpus.get("present"):
        if want:
            return [("gpus", FAIL, f"nvidia-smi not present, but the inventory expects {want} GPUs")]
        return [("gpus", INFO, "GPUs: not present (none expected)")]
    count = gpus.get("count")
    if count is None:
        return [("gpus", FAIL, f"nvidia-smi failed: {gpus.get('error', 'no output')}")]
    if count < want:
        return [("gpus", FAIL, f"{count} GPUs visible, the inventory expects {want}")]
    if count > want:
        return [("gpus", WARN, f"{count} GPUs visible, the inventory expects {want}")]
    return [("gpus", PASS, f"{count} GPUs")]


def _judge_ecc(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    ecc = raw.get("ecc") or {}
    if not ecc.get("present"):
        return []
    if ecc.get("error"):
        return [("ecc", WARN, f"ECC counters not readable: {ecc['error']}")]
    checks = []
    uncorrected = ecc.get("uncorrected")
    if uncorrected:
        bad = [str(g["gpu"]) for g in ecc.get("per_gpu") or [] if g.get("uncorrected")]
        checks.append(("ecc", FAIL, f"{uncorrected} uncorrected ECC errors (GPU {', '.join(bad)})"))
    elif uncorrected is None:
        checks.append(("ecc", INFO, "ECC counters not reported (ECC off?)"))
    else:
        checks.append(("ecc", PASS, "no uncorrected ECC errors"))
    if ecc.get("remap_failures"):
        checks.append(("ecc", FAIL, f"row remapping failed on {ecc['remap_failures']} GPU(s)"))
    return checks


def _judge_xid(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    xid = raw.get("xid") or {}
    if not xid.get("readable"):
        return [("xid", INFO, "kernel log not readable: XID errors not checked")]
    codes = set(xid.get("codes") or [])
    serious = sorted(codes & SERIOUS_XIDS)
    if serious:
        last = (xid.get("last") or [""])[-1]
        return [("xid", FAIL, f"XID {', '.join(map(str, serious))} in the kernel log (e.g. {last})")]
    if codes:
        return [("xid", WARN, f"XID {', '.join(map(str, sorted(codes)))} in the kernel log")]
    return [("xid", PASS, "no XID errors")]


def _judge_dcgm(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    dcgm = raw.get("dcgm") or {}
    if not dcgm.get("present"):
        return []
    if dcgm.get("passed"):
        return [("dcgm", PASS, "DCGM level-1 diagnostic passed")]
    return [("dcgm", FAIL, f"DCGM level-1 diagnostic failed: {str(dcgm.get('summary'))[:200]}")]


def _judge_persistence(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    state = raw.get("persistence") or {}
    if not state.get("present") or not expect.get("gpus") or not state.get("gpus"):
        return []
    off = state.get("disabled") or []
    if off:
        return [
            (
                "persistence",
                FAIL,
                f"persistence mode off on GPU {', '.join(map(str, off))}: start nvidia-persistenced "
                "(systemctl enable --now nvidia-persistenced)",
            )
        ]
    return [("persistence", PASS, "persistence mode on")]


def _judge_fabricmanager(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    if not expect.get("nvswitch"):
        return []
    state = raw.get("fabricmanager") or "not present"
    checks = [("fabricmanager", PASS, "nvidia-fabricmanager active")]
    if state not in ("active", "running (no systemd)"):
        message = (
            f"nvidia-fabricmanager is {state} on an NVSwitch node: CUDA cannot use the GPUs until it runs "
            "(systemctl enable --now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager)"
        )
        checks = [("fabricmanager", FAIL, message)]
    if expect.get("nvlsm"):  # fourth-generation NVSwitch (HGX B200/B300): NVLSM runs under the FM unit
        nvlsm = raw.get("nvlsm") or "not present"
        if nvlsm == "running":
            checks.append(("nvlsm", PASS, "nvlsm running"))
        else:
            checks.append(
                (
                    "nvlsm",
                    FAIL,
                    f"nvlsm is {nvlsm} on a fourth-generation NVSwitch node: the GPUs cannot join the NVLink "
                    "fabric without it (install nvlink5-<driver branch>, then systemctl restart "
                    "nvidia-fabricmanager; journalctl -u nvidia-fabricmanager)",
                )
            )
    return checks


def _judge_driver(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    loaded, want = raw.get("driver") or {}, expect.get("driver_branch")
    if not loaded.get("present") or not want or not loaded.get("branch"):
        return []
    if int(loaded["branch"]) < int(want):
        return [
            (
                "driver",
                FAIL,
                f"driver {loaded['version']} is older than the pinned branch {want}: "
                "install a newer driver (or an image that carries one) and reboot",
            )
        ]
    return [
        ("driver", PASS, f"driver {loaded['version']} ({'open' if loaded.get('open') else 'proprietary'})")
    ]


def _judge_fabric(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    fabric, want = raw.get("fabric") or {}, int(expect.get("fabric_interfaces") or 0)
    devices = fabric.get("devices")
    if devices is None:
        return [("fabric", WARN, f"fabric devices not counted: {fabric.get('error', 'no data')}")]
    if want and devices < want:
        return [
            (
                "fabric",
                FAIL,
                f"{devices} {fabric.get('kind')} devices, the inventory expects {want} "
                f"({fabric.get('method')})",
            )
        ]
    if want:
        return [("fabric", PASS, f"{devices} {fabric.get('kind')} devices")]
    return [("fabric", INFO, f"{devices} {fabric.get('kind')} devices (none expected)")]


def _judge_size(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    checks = []
    cpus, memory = raw.get("cpus"), raw.get("memory_mb")
    if isinstance(cpus, int) and expect.get("cpus") and cpus < expect["cpus"]:
        checks.append(("cpus", FAIL, f"{cpus} CPUs, but the node declares {expect['cpus']} to Slurm"))
    if isinstance(memory, int) and expect.get("memory_mb") and memory < expect["memory_mb"]:
        message = f"{memory} MB of memory, but the node declares {expect['memory_mb']} MB"
        checks.append(("memory", FAIL, message))
    return checks


def _judge_services(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    if "services" not in raw:  # not collected (--skip services: a Kubernetes pod runs no munge or slurmd)
        return []
    checks = []
    services = raw.get("services") or {}
    for name in ("munge", "slurmd"):
        state = services.get(name, "unknown")
        if state in ("active", "running (no systemd)"):
            continue
        checks.append((name, WARN if state == "not present" else FAIL, f"{name} is {state}"))
    return checks


def _judge_nccl_tests(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    smoke = raw.get("nccl_tests")
    if smoke is None:  # not asked for: the node has no GPU stack
        return []
    if "error" in smoke and "present" not in smoke:
        return [("nccl_tests", FAIL, f"nccl-tests smoke run broke: {smoke['error']}")]
    if not smoke.get("present"):
        return [("nccl_tests", FAIL, f"nccl-tests not installed: {smoke.get('note')}")]
    if smoke.get("passed"):
        return [("nccl_tests", PASS, "nccl-tests all_reduce_perf ran one rank")]
    return [
        (
            "nccl_tests",
            FAIL,
            f"nccl-tests all_reduce_perf cannot run one rank (exit {smoke.get('exit')}): "
            f"{smoke.get('error', 'no output')}",
        )
    ]


def _judge_nvlink(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    floor = expect.get("nvlink_floor_gbps")
    result = raw.get("nvlink")
    if floor is None or result is None:  # not asked for, or no floor for this type
        return []
    if not result.get("present"):
        return [("nvlink", FAIL, f"NVLink all_reduce not run: {result.get('note', result.get('error'))}")]
    busbw = result.get("busbw_gbps")
    what = f"all_reduce over NVLink ({result.get('gpus')} GPUs, {result.get('bytes')} bytes)"
    if busbw is None:
        return [("nvlink", FAIL, f"{what} gave no figure (exit {result.get('exit')}): {result.get('error')}")]
    if float(busbw) < float(floor):
        return [("nvlink", FAIL, f"{what}: {busbw} GB/s busbw, below the node floor {floor} GB/s")]
    return [("nvlink", PASS, f"{what}: {busbw} GB/s busbw (floor {floor})")]


def _judge_ready(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    """Ready before measured (issue 33): the NCCL environment file every rank sources, and GPUDirect RDMA's
    kernel module where the fabric reads GPU memory directly."""
    checks = []
    env = raw.get("nccl_env")
    if isinstance(env, dict) and "present" in env:
        if env["present"]:
            checks.append(("nccl_env", PASS, f"{env.get('path')} present"))
        else:
            checks.append(
                (
                    "nccl_env",
                    FAIL,
                    f"{env.get('path')} is missing or empty: every rank sources it (the fabric role writes "
                    "it: gpufleet configure)",
                )
            )
    direct = raw.get("gpudirect")
    if isinstance(direct, dict) and "nvidia_peermem" in direct and expect.get("gpudirect_rdma"):
        if direct["nvidia_peermem"]:
            checks.append(("gpudirect", PASS, "nvidia_peermem loaded"))
        elif int(expect.get("gpus") or 0) > 0:
            # A warning, not a failure: NCCL reaches GPU memory through DMA-BUF instead where the driver's
            # open kernel modules and Linux 5.12+ allow it, with no nvidia_peermem (NCCL_DMABUF_ENABLE).
            checks.append(
                (
                    "gpudirect",
                    WARN,
                    "nvidia_peermem is not loaded: GPUDirect RDMA needs it unless NCCL uses DMA-BUF (open "
                    "kernel modules, Linux 5.12+); modprobe nvidia_peermem",
                )
            )
    return checks


JUDGES = (
    _judge_ready,
    _judge_gpus,
    _judge_ecc,
    _judge_xid,
    _judge_dcgm,
    _judge_nccl_tests,
    _judge_nvlink,
    _judge_persistence,
    _judge_fabricmanager,
    _judge_driver,
    _judge_fabric,
    _judge_size,
    _judge_services,
)


def judge(raw: dict, expect: dict) -> list[tuple[str, str, str]]:
    """Every check of one node's report against what the node should have (see the section comment)."""
    return [check for rule in JUDGES for check in rule(raw, expect)]


# ---- command line -----------------------------------------------------------------------------------


def nccl_env(path: str) -> dict[str, object]:
    """The node's NCCL environment file (written by the fabric role): every collective's rank sources it."""
    file = Path(path)
    present = file.is_file() and file.stat().st_size > 0
    return {"path": path, "present": present}


def gpudirect() -> dict[str, object]:
    """GPUDirect RDMA's kernel side: the nvidia_peermem module (InfiniBand/RoCE; NVIDIA's GPU Operator
    validates it the same way: lsmod | grep ^nvidia_peermem), and dma-buf support as its alternative."""
    loaded = Path("/sys/module/nvidia_peermem").exists()
    return {"nvidia_peermem": loaded}


def collect(
    kind: str,
    skip: tuple[str, ...] = (),
    mount_point: str | None = None,
    bindir: str | None = None,
    nvlink: tuple[int, int] | None = None,
    env_file: str | None = None,
) -> dict[str, object]:
    report: dict[str, object] = {
        # The node's name: Slurm's, or the one a Kubernetes pod is told (its own host name is the pod's).
        "hostname": os.environ.get("SLURMD_NODENAME")
        or os.environ.get("GPUFLEET_NODE_NAME")
        or socket.gethostname().split(".")[0],
        "fqdn": socket.getfqdn(),
    }
    checks = {
        "gpus": gpus,
        "ecc": ecc,
        "xid": xids,
        "dcgm": dcgm,
        "persistence": persistence,
        "driver": driver,
        "fabricmanager": lambda: service("nvidia-fabricmanager"),
        "nvlsm": lambda: process("nvlsm"),
        "fabric": lambda: fabric(kind),
        "cpus": cpus,
        "memory_mb": memory_mb,
        "services": lambda: {"munge": service("munge"), "slurmd": service("slurmd")},
    }
    if mount_point:
        checks["mount"] = lambda: mount(mount_point)
    if env_file:
        checks["nccl_env"] = lambda: nccl_env(env_file)
    if kind in ("infiniband", "roce"):
        checks["gpudirect"] = gpudirect
    if bindir:
        checks["nccl_tests"] = lambda: nccl_tests(bindir)
    if bindir and nvlink:
        checks["nvlink"] = lambda: nvlink_allreduce(bindir, nvlink[0], nvlink[1])
    for key, check in checks.items():
        if key in skip:
            continue
        try:
            report[key] = check()
        except Exception as exc:  # a check that breaks is reported, the others still run
            report[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return report


def _option(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default


def _expectations(argv: list[str]) -> dict[str, object]:
    path = _option(argv, "--expect", EXPECT_FILE)
    try:
        expect = json.loads(Path(str(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        expect = {}
    for flag, key in (
        ("--gpus", "gpus"),
        ("--fabric-interfaces", "fabric_interfaces"),
        ("--driver-branch", "driver_branch"),
    ):
        if flag in argv:
            expect[key] = int(str(_option(argv, flag, "0")))
    if "--nvswitch" in argv:
        expect["nvswitch"] = True
    if "--nvlsm" in argv:
        expect["nvlsm"] = True
    return expect


# ``--skip`` takes report keys; these produce checks under other names.
_CHECKS_OF = {"services": ("munge", "slurmd"), "memory_mb": ("memory",)}


def check_node(argv: list[str]) -> int:
    """``--check``: judge this node, print one line, exit 1 on a failure (and drain with ``--drain``)."""
    expect = _expectations(argv)
    skip = tuple(filter(None, str(_option(argv, "--skip", "")).split(",")))
    report = collect(str(_option(argv, "--fabric", str(expect.get("fabric", "ethernet")))), skip)
    skipped = {name for key in skip for name in _CHECKS_OF.get(key, (key,))}
    checks = [check for check in judge(report, expect) if check[0] not in skipped]
    failures = [message for _name, status, message in checks if status == FAIL]
    node = str(report["hostname"])
    if not failures:
        passed = [message for _name, status, message in checks if status == PASS]
        print(f"gpufleet-node-check: OK {node}: {'; '.join(passed) or 'nothing to check'}")
        return 0
    reason = "; ".join(failures)
    print(f"gpufleet-node-check: FAIL {node}: {reason}")
    if "--drain" in argv:
        drain_reason = ("gpufleet-node-check: " + failures[0])[:200]
        rc, out = run(
            ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={drain_reason}"], timeout=30
        )
        if rc != 0:
            print(f"gpufleet-node-check: could not drain {node} (scontrol exit {rc}): {out.strip()[:200]}")
    return 1


def main(argv: list[str]) -> int:
    if "--check" in argv:
        return check_node(argv)
    gpus, size = _option(argv, "--nvlink-gpus"), _option(argv, "--nvlink-bytes")
    report = collect(
        str(_option(argv, "--fabric", "ethernet")),
        tuple(filter(None, str(_option(argv, "--skip", "")).split(","))),
        mount_point=_option(argv, "--mount"),
        bindir=_option(argv, "--nccl-tests"),
        nvlink=(int(gpus), int(size)) if gpus and size else None,
        env_file=_option(argv, "--env-file"),
    )
    sys.stdout.write(report_lines(report))
    sys.stdout.flush()
    return 0


# srun forwards each task's output in pieces of about 1 KiB: a longer line from one node can be cut and
# interleaved with another node's output. So a report longer than one piece goes out as numbered parts,
# each a short line of its own, which the reader joins per host (validate.slurm.parse_health_output).
PART_MARKER = "GPUFLEET_HEALTH_PART "
PART_BYTES = 768


def report_lines(report: dict[str, object]) -> str:
    payload = json.dumps(report, sort_keys=True)
    if len(payload) <= PART_BYTES:
        return MARKER + payload + "\n"
    host = str(report.get("hostname"))
    parts = [payload[i : i + PART_BYTES] for i in range(0, len(payload), PART_BYTES)]
    return "".join(f"{PART_MARKER}{host} {n} {len(parts)} {part}\n" for n, part in enumerate(parts))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
