"""Judge each compute node's health line against what the inventory says the node should have.

The script (``node_health.py``) reports what it finds; this module decides. A node fails when it did
not answer, Slurm does not consider it usable, its GPU or fabric device count is short of the
inventory's ``gpufleet_gpus`` / ``gpufleet_fabric_interfaces``, it has uncorrected ECC errors, remapped-
row failures or a serious XID, DCGM's level-1 diagnostic failed, the one-rank nccl-tests smoke run failed
(with the binary's own error, e.g. "CUDA driver version is insufficient for CUDA runtime version"), it
has fewer CPUs or less memory than it declares to Slurm, or munge/slurmd are not running. Tools that
are absent are "not present" (not a failure) unless the inventory expects GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.inventory.model import Host
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN, Check
from gpufleet.validate.slurm import HealthRun

# XIDs that mean the hardware (not the application) is in trouble: double-bit ECC, row remapping,
# NVLink, fallen off the bus, uncontained errors, GSP failures (NVIDIA's XID catalog).
SERIOUS_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})


@dataclass
class NodeHealth:
    node: str
    checks: list[Check] = field(default_factory=list)
    raw: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return not any(check.status == FAIL for check in self.checks)

    @property
    def problems(self) -> list[str]:
        return [check.message for check in self.checks if check.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "passed": self.passed,
            "checks": [check.to_json() for check in self.checks],
            "raw": self.raw,
        }


@dataclass
class HealthReport:
    nodes: list[NodeHealth]

    @property
    def passed(self) -> bool:
        return all(node.passed for node in self.nodes)

    @property
    def failed_nodes(self) -> list[str]:
        return [node.node for node in self.nodes if not node.passed]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed_nodes": self.failed_nodes,
            "nodes": [n.to_json() for n in self.nodes],
        }

    def markdown(self) -> list[str]:
        lines = ["## Node health", ""]
        lines.append(
            f"{len(self.nodes) - len(self.failed_nodes)} of {len(self.nodes)} nodes healthy"
            + (f"; failing: {', '.join(self.failed_nodes)}" if self.failed_nodes else "")
        )
        lines += ["", "| node | verdict | GPUs | fabric devices | problems |", "|---|---|---|---|---|"]
        for node in self.nodes:
            raw = node.raw or {}
            gpus = (raw.get("gpus") or {}).get("count")
            fabric = (raw.get("fabric") or {}).get("devices")
            problems = "; ".join(node.problems) or "-"
            lines.append(
                f"| {node.node} | {'ok' if node.passed else '**FAIL**'} | {_cell(gpus)} | {_cell(fabric)} | "
                f"{problems.replace('|', '/')} |"
            )
        return lines


def _cell(value: Any) -> str:
    return "not present" if value is None else str(value)


def evaluate_health(hosts: list[Host], run: HealthRun) -> HealthReport:
    return HealthReport([evaluate_node(host, run) for host in hosts])


def evaluate_node(host: Host, run: HealthRun) -> NodeHealth:
    result = NodeHealth(host.name)
    checks = result.checks
    state = run.states.get(host.name)
    if state is not None:
        if state.usable:
            checks.append(Check("slurm", PASS, f"Slurm state {state.state}"))
        else:
            reason = f" ({state.reason})" if state.reason and state.reason != "none" else ""
            checks.append(
                Check("slurm", FAIL, f"Slurm state {state.state}{reason}: the node cannot run jobs")
            )
    raw = run.answers.get(host.name) or run.answers.get(host.name.split(".")[0])
    if raw is None:
        detail = f": {run.stderr.strip().splitlines()[-1][:200]}" if run.stderr.strip() else ""
        if state is None or state.usable:
            checks.append(
                Check("answer", FAIL, f"no health report from the node (srun exit {run.rc}){detail}")
            )
        return result
    result.raw = raw
    _gpus(host, raw, checks)
    _ecc(raw, checks)
    _xid(raw, checks)
    _dcgm(raw, checks)
    _nccl_tests(raw, checks)
    _fabric(host, raw, checks)
    _size(host, raw, checks)
    _services(raw, checks)
    return result


def _gpus(host: Host, raw: dict[str, Any], checks: list[Check]) -> None:
    gpus = raw.get("gpus") or {}
    if not gpus.get("present"):
        if host.gpus:
            checks.append(
                Check("gpus", FAIL, f"nvidia-smi not present, but the inventory expects {host.gpus} GPUs")
            )
        else:
            checks.append(Check("gpus", INFO, "GPUs: not present (none expected)"))
        return
    count = gpus.get("count")
    if count is None:
        checks.append(Check("gpus", FAIL, f"nvidia-smi failed: {gpus.get('error', 'no output')}"))
    elif count < host.gpus:
        checks.append(Check("gpus", FAIL, f"{count} GPUs visible, the inventory expects {host.gpus}"))
    elif count > host.gpus:
        checks.append(Check("gpus", WARN, f"{count} GPUs visible, the inventory expects {host.gpus}"))
    else:
        checks.append(Check("gpus", PASS, f"{count} GPUs"))


def _ecc(raw: dict[str, Any], checks: list[Check]) -> None:
    ecc = raw.get("ecc") or {}
    if not ecc.get("present"):
        return
    if ecc.get("error"):
        checks.append(Check("ecc", WARN, f"ECC counters not readable: {ecc['error']}"))
        return
    uncorrected = ecc.get("uncorrected")
    if uncorrected:
        bad = [str(g["gpu"]) for g in ecc.get("per_gpu") or [] if g.get("uncorrected")]
        checks.append(Check("ecc", FAIL, f"{uncorrected} uncorrected ECC errors (GPU {', '.join(bad)})"))
    elif uncorrected is None:
        checks.append(Check("ecc", INFO, "ECC counters not reported (ECC off?)"))
    else:
        checks.append(Check("ecc", PASS, "no uncorrected ECC errors"))
    if ecc.get("remap_failures"):
        checks.append(Check("ecc", FAIL, f"row remapping failed on {ecc['remap_failures']} GPU(s)"))


def _xid(raw: dict[str, Any], checks: list[Check]) -> None:
    xid = raw.get("xid") or {}
    if not xid.get("readable"):
        checks.append(Check("xid", INFO, "kernel log not readable: XID errors not checked"))
        return
    codes = set(xid.get("codes") or [])
    serious = sorted(codes & SERIOUS_XIDS)
    if serious:
        last = (xid.get("last") or [""])[-1]
        checks.append(
            Check("xid", FAIL, f"XID {', '.join(map(str, serious))} in the kernel log (e.g. {last})")
        )
    elif codes:
        checks.append(Check("xid", WARN, f"XID {', '.join(map(str, sorted(codes)))} in the kernel log"))
    else:
        checks.append(Check("xid", PASS, "no XID errors"))


def _dcgm(raw: dict[str, Any], checks: list[Check]) -> None:
    dcgm = raw.get("dcgm") or {}
    if not dcgm.get("present"):
        return
    if dcgm.get("passed"):
        checks.append(Check("dcgm", PASS, "DCGM level-1 diagnostic passed"))
    else:
        checks.append(
            Check("dcgm", FAIL, f"DCGM level-1 diagnostic failed: {str(dcgm.get('summary'))[:200]}")
        )


def _nccl_tests(raw: dict[str, Any], checks: list[Check]) -> None:
    smoke = raw.get("nccl_tests")
    if smoke is None:  # not asked for: the node has no GPU stack
        return
    if "error" in smoke and "present" not in smoke:
        checks.append(Check("nccl_tests", FAIL, f"nccl-tests smoke run broke: {smoke['error']}"))
    elif not smoke.get("present"):
        checks.append(Check("nccl_tests", FAIL, f"nccl-tests not installed: {smoke.get('note')}"))
    elif smoke.get("passed"):
        checks.append(Check("nccl_tests", PASS, "nccl-tests all_reduce_perf ran one rank"))
    else:
        checks.append(
            Check(
                "nccl_tests",
                FAIL,
                f"nccl-tests all_reduce_perf cannot run one rank (exit {smoke.get('exit')}): "
                f"{smoke.get('error', 'no output')}",
            )
        )


def _fabric(host: Host, raw: dict[str, Any], checks: list[Check]) -> None:
    fabric = raw.get("fabric") or {}
    devices = fabric.get("devices")
    if devices is None:
        checks.append(Check("fabric", WARN, f"fabric devices not counted: {fabric.get('error', 'no data')}"))
        return
    if host.fabric_interfaces and devices < host.fabric_interfaces:
        checks.append(
            Check(
                "fabric",
                FAIL,
                f"{devices} {fabric.get('kind')} devices, the inventory expects {host.fabric_interfaces} "
                f"({fabric.get('method')})",
            )
        )
    elif host.fabric_interfaces:
        checks.append(Check("fabric", PASS, f"{devices} {fabric.get('kind')} devices"))
    else:
        checks.append(Check("fabric", INFO, f"{devices} {fabric.get('kind')} devices (none expected)"))


def _size(host: Host, raw: dict[str, Any], checks: list[Check]) -> None:
    cpus, memory = raw.get("cpus"), raw.get("memory_mb")
    if isinstance(cpus, int) and cpus < host.cpus:
        checks.append(Check("cpus", FAIL, f"{cpus} CPUs, but the node declares {host.cpus} to Slurm"))
    if isinstance(memory, int) and memory < host.memory_mb:
        checks.append(
            Check("memory", FAIL, f"{memory} MB of memory, but the node declares {host.memory_mb} MB")
        )


def _services(raw: dict[str, Any], checks: list[Check]) -> None:
    services = raw.get("services") or {}
    for name in ("munge", "slurmd"):
        state = services.get(name, "unknown")
        if state in ("active", "running (no systemd)"):
            continue
        status = WARN if state == "not present" else FAIL
        checks.append(Check(name, status, f"{name} is {state}"))
