"""Judge each compute node's health line against what the inventory says the node should have.

The script (``node_health.py``) reports what it finds; its ``judge`` holds the rules, which the node also
applies to itself (``gpufleet-node-check --check``, Slurm's HealthCheckProgram), so both always agree.
This module adds Slurm's view and turns the rules' results into ``Check``s. A node fails when it did not
answer, Slurm does not consider it usable, its GPU or fabric device count is short of the inventory's
``gpufleet_gpus`` / ``gpufleet_fabric_interfaces``, it has uncorrected ECC errors, remapped-row failures
or a serious XID, DCGM's level-1 diagnostic failed, a GPU runs without persistence mode, an NVSwitch node
(``gpufleet_nvswitch``) has no running nvidia-fabricmanager, it has fewer CPUs or less memory than it
declares to Slurm, or munge/slurmd are not running. Tools that are absent are "not present" (not a
failure) unless the inventory expects GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.inventory.model import Host
from gpufleet.validate.gate import FAIL, PASS, Check
from gpufleet.validate.node_health import SERIOUS_XIDS, judge
from gpufleet.validate.slurm import HealthRun

__all__ = [
    "SERIOUS_XIDS",
    "HealthReport",
    "NodeHealth",
    "driver_branch",
    "evaluate_health",
    "evaluate_node",
    "expectations",
]


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


def evaluate_health(hosts: list[Host], run: HealthRun, driver_branch: int | None = None) -> HealthReport:
    """``driver_branch``: the pinned driver branch (the inventory's software), the loaded driver's minimum."""
    return HealthReport([evaluate_node(host, run, driver_branch) for host in hosts])


def driver_branch(software: dict[str, Any]) -> int | None:
    """The branch of ``software.nvidia_driver`` ("580" or "580.95.05"), if the inventory has one."""
    text = str(software.get("nvidia_driver") or "").split(".")[0]
    return int(text) if text.isdigit() else None


def evaluate_node(host: Host, run: HealthRun, driver_branch: int | None = None) -> NodeHealth:
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
    expect = expectations(host, driver_branch)
    checks.extend(Check(name, status, message) for name, status, message in judge(raw, expect))
    return result


def expectations(host: Host, driver_branch: int | None = None) -> dict[str, Any]:
    """What the inventory says ``host`` has, in the shape ``node_health.judge`` (and the node) reads."""
    expect: dict[str, Any] = {
        "gpus": host.gpus,
        "fabric_interfaces": host.fabric_interfaces,
        "cpus": host.cpus,
        "memory_mb": host.memory_mb,
        "nvswitch": host.nvswitch,
    }
    if driver_branch is not None:
        expect["driver_branch"] = driver_branch
    return expect
