"""Judge each compute node's health line against what the inventory says the node should have.

The script (``node_health.py``) reports what it finds; its ``judge`` holds the rules, which the node also
applies to itself (``gpufleet-node-check --check``, Slurm's HealthCheckProgram), so both always agree.
This module adds Slurm's view, the checks that need the inventory's fabric facts (what ``fi_info``,
``ibstat`` and ``ip -j link`` printed, parsed by ``fabric_facts``) and the shared filesystem, and turns the
results into ``Check``s. A node fails when it did not answer, Slurm does not consider it usable, its GPU or
fabric device count is short of the inventory's ``gpufleet_gpus`` / ``gpufleet_fabric_interfaces``, it has
uncorrected ECC errors, remapped-row failures or a serious XID, DCGM's level-1 diagnostic failed, a GPU runs
without persistence mode, its all_reduce over NVLink falls below its type's node floor (where the catalog
has one and the run was asked for), an NVSwitch node (``gpufleet_nvswitch``) has no running
nvidia-fabricmanager (or, on fourth-generation NVSwitch HGX B200/B300, no nvlsm process), it has fewer CPUs
or less memory than it declares to Slurm, munge/slurmd are not running, a fabric port or NIC is missing,
down or at the wrong rate or MTU, or the inventory's shared filesystem is not mounted at its mount point
with the filesystem type its kind means, or cannot be written. Tools that are absent are "not present" (not
a failure) unless the inventory expects GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.catalog import NodeFloor, load_catalog
from gpufleet.inventory.model import Host
from gpufleet.node.node_health import SERIOUS_XIDS, judge
from gpufleet.severity import Severity
from gpufleet.spec.model import Collective
from gpufleet.validate.fabric_facts import (
    efa_problems,
    nic_problems,
    parse_fi_info,
    parse_ibstat,
    parse_ip_link,
    port_problems,
)
from gpufleet.validate.gate import FAIL, PASS, Check
from gpufleet.validate.scheduler import HealthRun

__all__ = [
    "SERIOUS_XIDS",
    "HealthReport",
    "NodeHealth",
    "driver_branch",
    "evaluate_health",
    "evaluate_node",
    "expectations",
    "node_floor",
]

# The filesystem type each kind of gpufleet_filesystem mounts (None: any; the local volume is a bind mount
# of whatever the host's disk is).
FSTYPE_BY_KIND: dict[str, tuple[str, ...] | None] = {
    "fsx_lustre": ("lustre",),
    "managed_lustre": ("lustre",),
    "azure_lustre": ("lustre",),
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
    hosts: list[Host],
    run: HealthRun,
    filesystem: Mapping[str, Any] | None = None,
    *,
    driver_branch: int | None = None,
) -> HealthReport:
    """``filesystem``: the inventory's; ``driver_branch``: the pinned driver branch (the inventory's
    software), the loaded driver's minimum."""
    return HealthReport(
        [evaluate_node(host, run, filesystem, driver_branch=driver_branch) for host in hosts], filesystem
    )


def driver_branch(software: dict[str, Any]) -> int | None:
    """The branch of ``software.nvidia_driver`` ("580" or "580.95.05"), if the inventory has one."""
    text = str(software.get("nvidia_driver") or "").split(".")[0]
    return int(text) if text.isdigit() else None


# How each scheduler's node-state check and health job are named in the messages (the check's name is the
# scheduler's: "slurm", "kubernetes").
_STATE_WORDS = {"slurm": ("Slurm state", "srun"), "kubernetes": ("Kubernetes node", "pod")}


def evaluate_node(
    host: Host,
    run: HealthRun,
    filesystem: Mapping[str, Any] | None = None,
    *,
    driver_branch: int | None = None,
) -> NodeHealth:
    result = NodeHealth(host.name)
    checks = result.checks
    state = run.states.get(host.name)
    words, job = _STATE_WORDS.get(run.scheduler, (run.scheduler, "job"))
    if state is not None:
        if state.usable:
            checks.append(Check(run.scheduler, PASS, f"{words} {state.state}"))
        else:
            reason = f" ({state.reason})" if state.reason and state.reason != "none" else ""
            checks.append(
                Check(run.scheduler, FAIL, f"{words} {state.state}{reason}: the node cannot run jobs")
            )
    raw = run.answers.get(host.name) or run.answers.get(host.name.split(".")[0])
    if raw is None:
        detail = f": {run.stderr.strip().splitlines()[-1][:200]}" if run.stderr.strip() else ""
        if state is None or state.usable:
            checks.append(
                Check("answer", FAIL, f"no health report from the node ({job} exit {run.rc}){detail}")
            )
        return result
    result.raw = raw
    expect = expectations(host, driver_branch)
    checks.extend(Check(name, Severity(status), message) for name, status, message in judge(raw, expect))
    fabric = raw.get("fabric") or {}
    _fabric_tools(host, str(fabric.get("kind")), fabric.get("raw") or {}, checks)
    _filesystem(filesystem or {}, raw, checks)
    return result


# Fourth-generation NVSwitch HGX (B100/B200 sm_100, B300 sm_103, 8 GPUs on the baseboard) runs NVLSM under
# nvidia-fabricmanager (NVIDIA Fabric Manager user guide, "Systems Using Fourth Generation NVSwitches"); the
# nvidia_driver role's nvidia_driver_nvlsm default applies the same rule. GB200 NVL72 trays (4 GPUs) do not.
_NVLSM_ARCHS = ("sm_100", "sm_103")


def node_floor(host: Host) -> NodeFloor | None:
    """The catalog's single-node all_reduce floor of the host's type (Microsoft's for its ND sizes)."""
    item = load_catalog().get(host.instance_type)
    floors = [f for f in (item.node_floors if item else []) if f.collective == Collective.ALL_REDUCE]
    return floors[0] if floors else None


def expectations(host: Host, driver_branch: int | None = None) -> dict[str, Any]:
    """What the inventory says ``host`` has, in the shape ``node_health.judge`` (and the node) reads."""
    expect: dict[str, Any] = {
        "gpus": host.gpus,
        "fabric_interfaces": host.fabric_interfaces,
        "cpus": host.cpus,
        "memory_mb": host.memory_mb,
        "nvswitch": host.nvswitch,
        "nvlsm": host.nvswitch and host.gpus == 8 and host.gpu_arch in _NVLSM_ARCHS,
    }
    if driver_branch is not None:
        expect["driver_branch"] = driver_branch
    floor = node_floor(host)
    if floor is not None:
        expect["nvlink_floor_gbps"] = floor.busbw_gbps
    item = load_catalog().get(host.instance_type)
    if item is not None and item.fabric.gpudirect_rdma:
        expect["gpudirect_rdma"] = True
    return expect


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
