"""Per-node health check, run on every compute node by the validation suite (``srun ... python3 -c``).

Standalone on purpose: the standard library only, Python 3.8+, no gpufleet import, so that it runs on
any node image. It prints one line, ``GPUFLEET_HEALTH {json}``, and always exits 0: whatever is missing
on the node (no GPU, no nvidia-smi, no dcgmi, dmesg not readable) is reported as "not present" or "not
readable", never as a crash. The suite compares the line with the inventory's expectations.

Reported: hostname and Slurm node name; GPUs (``nvidia-smi -L``); ECC error counts and remapped-row
failures (``nvidia-smi --query-gpu``); XID errors (``dmesg``, else ``journalctl -k``); the DCGM level-1
diagnostic when ``dcgmi`` exists; fabric devices (EFA: /sys/class/infiniband devices bound to the efa
driver, or ``fi_info -p efa``; InfiniBand/RoCE: /sys/class/infiniband ports that are ACTIVE with the
right link layer; TCPX/TCPXO: gVNIC interfaces other than the one with the default route); CPU count
and memory; the munge and slurmd services; with ``--nccl-tests DIR``, a one-rank smoke run of
``DIR/all_reduce_perf`` (8 bytes, one iteration) started as its own process, outside Slurm's MPI, so a
node whose CUDA, NCCL or driver cannot run the binaries says why (e.g. "CUDA driver version is
insufficient for CUDA runtime version").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

MARKER = "GPUFLEET_HEALTH "
XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


def run(argv: list[str], timeout: float = 60.0, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command; (exit code, stdout+stderr). 127 when the tool is not installed, 124 on timeout."""
    if shutil.which(argv[0]) is None:
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
    per_gpu = []
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            per_gpu.append(
                {"gpu": parts[0], "uncorrected": _int_or_none(parts[1]), "corrected": _int_or_none(parts[2])}
            )
    uncorrected = [item["uncorrected"] for item in per_gpu if item["uncorrected"] is not None]
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
    rc, out = run(["dcgmi", "diag", "-r", "1", "-j"], timeout=600)
    if rc == 127:
        return {"present": False, "note": "dcgmi not present"}
    text = out.strip()
    failed = rc != 0 or '"Fail"' in text or '"fail"' in text
    summary = ""
    try:
        data = json.loads(text)
        summary = json.dumps(data)[:400]
    except ValueError:
        summary = text[-400:]
    return {"present": True, "passed": not failed, "exit": rc, "summary": summary}


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


def fabric(kind: str) -> dict[str, object]:
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


def service(name: str) -> str:
    """systemd's view of a service, else whether a process of that name runs; 'not present' if neither."""
    rc, out = run(["systemctl", "is-active", name], timeout=15)
    state = out.strip().splitlines()[0] if out.strip() else ""
    if state in _UNIT_STATES:
        return state
    rc, _ = run(["pgrep", "-x", name], timeout=15)
    if rc == 127:
        return "not present"
    return "running (no systemd)" if rc == 0 else "not running"


def main(argv: list[str]) -> int:
    kind = argv[argv.index("--fabric") + 1] if "--fabric" in argv else "ethernet"
    bindir = argv[argv.index("--nccl-tests") + 1] if "--nccl-tests" in argv else None
    report: dict[str, object] = {
        "hostname": os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
        "fqdn": socket.getfqdn(),
    }
    checks = {
        "gpus": gpus,
        "ecc": ecc,
        "xid": xids,
        "dcgm": dcgm,
        "fabric": lambda: fabric(kind),
        "cpus": cpus,
        "memory_mb": memory_mb,
        "services": lambda: {"munge": service("munge"), "slurmd": service("slurmd")},
    }
    if bindir:
        checks["nccl_tests"] = lambda: nccl_tests(bindir)
    for key, check in checks.items():
        try:
            report[key] = check()
        except Exception as exc:  # a check that breaks is reported, the others still run
            report[key] = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(MARKER + json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
