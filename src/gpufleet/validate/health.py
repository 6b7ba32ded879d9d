"""Judge each compute node's health line against what the inventory says the node should have.

The script (``node_health.py``) reports what it finds; this module decides. A node fails when it did
not answer, Slurm does not consider it usable, its GPU or fabric device count is short of the
inventory's ``gpufleet_gpus`` / ``gpufleet_fabric_interfaces``, it has uncorrected ECC errors, remapped-
row failures or a serious XID, DCGM's level-1 diagnostic failed, it has fewer CPUs or less memory than it
declares to Slurm, munge/slurmd are not running, or the inventory's shared filesystem is not mounted at
its mount point with the filesystem type its kind means, or cannot be written. Tools that are absent are
"not present" (not a failure) unless the inventory expects GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.inventory.model import Host
from gpufleet.validate.fabric_facts import (
    efa_problems,
    nic_problems,
    parse_fi_info,
    parse_ibstat,
    parse_ip_link,
    port_problems,
)
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN, Check
from gpufleet.validate.slurm import HealthRun

# XIDs that mean the hardware (not the application) is in trouble: double-bit ECC, row remapping,
# NVLink, fallen off the bus, uncontained errors, GSP failures (NVIDIA's XID catalog).
SERIOUS_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})

# The filesystem type each kind of gpufleet_filesystem mounts (None: any; the local volume is a bind mount
# of whatever the host's disk is).
FSTYPE_BY_KIND: dict[str, tuple[str, ...] | None] = {
    "fsx_lustre": ("lustre",),
    "managed_lustre": ("lustre",),
    "filestore": ("nfs", "nfs4"),
    "nfs": ("nfs", "nfs4"),
    "volume": None,
}


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
    filesystem: Mapping[str, Any] | None = None

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
        mounts = [check for node in self.nodes for check in node.checks if check.name == "filesystem"]
        if mounts and self.filesystem:
            good = sum(check.status == PASS for check in mounts)
            lines += [
                f"Shared filesystem {self.filesystem.get('mount_point')} ({self.filesystem.get('kind')}): "
                f"mounted and writable on {good} of {len(mounts)} nodes",
                "",
            ]
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


def evaluate_health(
    hosts: list[Host], run: HealthRun, filesystem: Mapping[str, Any] | None = None
) -> HealthReport:
    return HealthReport([evaluate_node(host, run, filesystem) for host in hosts], filesystem)


def evaluate_node(host: Host, run: HealthRun, filesystem: Mapping[str, Any] | None = None) -> NodeHealth:
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
    _fabric(host, raw, checks)
    _size(host, raw, checks)
    _services(raw, checks)
    _filesystem(filesystem or {}, raw, checks)
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
    _fabric_tools(host, str(fabric.get("kind")), fabric.get("raw") or {}, checks)


def _fabric_tools(host: Host, kind: str, raw: dict[str, str], checks: list[Check]) -> None:
    """What fi_info, ibstat and ip -j link printed on the node, against the inventory's fabric facts."""
    found: dict[str, list[str]] = {}
    if "fi_info" in raw and host.fabric_interfaces:
        found["fi_info"] = efa_problems(parse_fi_info(raw["fi_info"]), host.fabric_interfaces)
    if "ibstat" in raw and host.fabric_interfaces:
        layer = "Ethernet" if kind == "roce" else "InfiniBand"
        found["ibstat"] = port_problems(
            parse_ibstat(raw["ibstat"]),
            expected=host.fabric_interfaces,
            link_layer=layer,
            rate_gbps=host.fabric_port_gbps,
        )
    if "ip_link" in raw and host.fabric_nics:
        try:
            found["ip link"] = nic_problems(parse_ip_link(raw["ip_link"]), host.fabric_nics, host.fabric_mtu)
        except ValueError as exc:
            found["ip link"] = [str(exc)]
    for tool, problems in found.items():
        if problems:
            checks.append(Check("fabric", FAIL, f"{tool}: {'; '.join(problems[:6])}"))
        else:
            checks.append(Check("fabric", PASS, f"{tool}: as the inventory says"))


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


def _filesystem(filesystem: Mapping[str, Any], raw: dict[str, Any], checks: list[Check]) -> None:
    kind = filesystem.get("kind", "none")
    if kind not in FSTYPE_BY_KIND or not filesystem.get("mount_point"):
        return
    expected = FSTYPE_BY_KIND[kind]
    want = "/".join(expected) if expected else kind
    mount = raw.get("mount")
    path = str(filesystem["mount_point"])
    if not isinstance(mount, dict) or "mounted" not in mount:
        detail = mount.get("error") if isinstance(mount, dict) else "the health script did not check it"
        checks.append(Check("filesystem", FAIL, f"{path} not checked (expected {want}): {detail}"))
    elif not mount["mounted"]:
        where = "does not exist" if mount.get("exists") is False else "is not mounted"
        checks.append(Check("filesystem", FAIL, f"{path} {where} (expected {want})"))
    elif expected and mount.get("fstype") not in expected:
        checks.append(
            Check(
                "filesystem",
                FAIL,
                f"{path} is {mount.get('fstype')} from {mount.get('source')} (expected {want})",
            )
        )
    elif not mount.get("writable"):
        reason = mount.get("error") or "not writable"
        checks.append(Check("filesystem", FAIL, f"{path} ({mount.get('fstype')}) is not writable: {reason}"))
    else:
        checks.append(
            Check("filesystem", PASS, f"{path} {mount.get('fstype')} from {mount.get('source')}, writable")
        )
