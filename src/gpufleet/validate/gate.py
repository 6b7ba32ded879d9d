"""The gate: is this nccl-tests result good enough for a training run?

Rules, in the order they are checked (docs/validation.md says the same for users):

1. Correctness. ``Test ... failure`` lines or a broken row, any ``#wrong`` above 0, an out-of-bounds count
   above 0, or an ``Avg bus bandwidth ... FAILED`` line each fail the gate. A table whose every ``#wrong``
   is ``N/A`` was run without a data check (``-c 0``): that is said as a warning.
2. Transport. NCCL must have used the network the fabric needs (EFA: aws-ofi-nccl; InfiniBand/RoCE: IB
   verbs; TCPX/TCPXO: Google's plugins; ethernet: sockets); when the run says which transport the nodes'
   NCCL environment file configured (``transport``), exactly that one. Anything else (typically
   ``Socket`` on an EFA or InfiniBand cluster, a silent fallback to TCP) fails with the evidence line.
3. Bandwidth, on large messages only: the rows at or above ``gate_min_bytes`` (1 GiB by default). The
   figure is the out-of-place busbw at the baseline's message size when the log has that size, else at
   the largest measured size at or above the threshold (never the average over all sizes). It must reach
   the explicit floor ``min_busbw[collective]`` when one is given, else ``margin`` x the catalog's
   baseline for the instance type, node count and collective. With neither, the gate is correctness-only
   and the verdict says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpufleet.catalog import Baseline, Catalog, load_catalog
from gpufleet.severity import CHECK_STATUSES, Severity
from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.spec.units import format_bytes
from gpufleet.validate.models import (
    TRANSPORT_FASTSOCKET,
    TRANSPORT_GIB,
    TRANSPORT_IB,
    TRANSPORT_IBEXT,
    TRANSPORT_OFI,
    TRANSPORT_SOCKET,
    TRANSPORT_TCPX,
    TRANSPORT_TCPXO,
    Row,
    TestResult,
)
from gpufleet.validate.nccl_log import strip_prefix

# The transports NCCL may use on each fabric.
FABRIC_TRANSPORTS: dict[FabricKind, frozenset[str]] = {
    FabricKind.EFA: frozenset({TRANSPORT_OFI}),
    FabricKind.INFINIBAND: frozenset({TRANSPORT_IB, TRANSPORT_IBEXT}),
    FabricKind.ROCE: frozenset({TRANSPORT_IB, TRANSPORT_IBEXT, TRANSPORT_GIB}),
    FabricKind.TCPX: frozenset({TRANSPORT_TCPX}),
    FabricKind.TCPXO: frozenset({TRANSPORT_TCPXO}),
    FabricKind.ETHERNET: frozenset({TRANSPORT_SOCKET, TRANSPORT_FASTSOCKET}),
}

_TRANSPORT_FIX: dict[FabricKind, str] = {
    FabricKind.EFA: "check the EFA devices (fi_info -p efa), the aws-ofi-nccl plugin on LD_LIBRARY_PATH and "
    "FI_PROVIDER=efa",
    FabricKind.INFINIBAND: "check the HCAs (ibv_devinfo), NCCL_IB_HCA and that NCCL_IB_DISABLE is not set",
    FabricKind.ROCE: "check the RDMA devices (ibv_devinfo), NCCL_IB_HCA, the GID table, and the net plugin",
    FabricKind.TCPX: "check the GPUDirect-TCPX plugin on LD_LIBRARY_PATH, the rx-datapath manager and the "
    "NCCL_GPUDIRECTTCPX_* settings",
    FabricKind.TCPXO: "check the TCPXO plugin (/var/lib/tcpxo/lib64), nccl-env-profile.sh and the "
    "NCCL_FASTRAK_* settings",
    FabricKind.ETHERNET: "set fabric to the network NCCL used, or NCCL_NET=Socket",
}

# A check's status: a Severity spelled as the gate always printed it.
PASS, FAIL, WARN, INFO = Severity.PASS, Severity.FAIL, Severity.WARN, Severity.INFO


class GateMode(StrEnum):
    """What a verdict's bandwidth was judged against (rule 3 of the module doc)."""

    BASELINE = "baseline"  # margin x the catalog's baseline for the instance type and node count
    FLOOR = "floor"  # the spec's explicit validation.min_busbw
    CORRECTNESS_ONLY = "correctness-only"  # neither: bandwidth not judged


@dataclass(frozen=True)
class GateConfig:
    """What a result is judged against. ``from_spec`` builds it from the spec's ``validation`` block."""

    gate_min_bytes: int = 1 << 30
    margin: float = 0.9
    min_busbw: Mapping[str, float] = field(default_factory=dict)
    instance_type: str | None = None
    nodes: int | None = None
    fabric: FabricKind | None = None
    # The transport the nodes' NCCL environment file configured (its GPUFLEET_TRANSPORT, as the runs
    # report it); when given, the only one accepted, else any of FABRIC_TRANSPORTS[fabric].
    transport: str | None = None
    # The suite runs with NCCL_DEBUG=INFO, so a missing transport line there is itself a failure; a pasted
    # log may simply have been run without it (a warning).
    require_transport: bool = False
    # A run gpufleet started must end with its summary lines; a pasted excerpt often does not.
    require_complete: bool = False
    # Sets the collective of tests whose log does not name it (inferred from the row shape).
    collective: str | None = None
    # The image the run's ranks ran inside (pyxis), when the spec names one: a wrong or unconfirmed
    # transport is then the image's NCCL not reaching the fabric, and the message says so.
    container_image: str | None = None

    @classmethod
    def from_spec(cls, validation: ValidationSpec, **overrides: Any) -> GateConfig:
        values: dict[str, Any] = {
            "gate_min_bytes": validation.gate_min_bytes,
            "margin": validation.baseline_margin,
            "min_busbw": {collective.value: floor for collective, floor in validation.min_busbw.items()},
        }
        values.update(overrides)
        return cls(**values)


@dataclass
class Check:
    name: str
    status: Severity  # PASS, FAIL, WARN or INFO
    message: str

    def __post_init__(self) -> None:
        # A status read back from a node's report or a saved result arrives as its word.
        self.status = Severity(self.status)
        if self.status not in CHECK_STATUSES:
            raise ValueError(f"check '{self.name}': a status is pass, fail, warn or info, not {self.status}")

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status.value, "message": self.message}


@dataclass
class Verdict:
    passed: bool
    collective: str | None
    mode: GateMode
    checks: list[Check]
    baseline: dict[str, Any] | None = None
    floor: float | None = None
    margin: float | None = None
    threshold: float | None = None
    measured_busbw: float | None = None
    measured_bytes: int | None = None
    measured_half: str | None = None
    nodes: int | None = None
    instance_type: str | None = None

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == FAIL]

    @property
    def warnings(self) -> list[Check]:
        return [check for check in self.checks if check.status == WARN]

    @property
    def summary(self) -> str:
        word = "PASS" if self.passed else "FAIL"
        name = self.collective or "unknown collective"
        if not self.passed:
            return f"{word} {name}: " + "; ".join(check.message for check in self.failures)
        if self.mode is GateMode.CORRECTNESS_ONLY:
            return (
                f"{word} {name}: correctness only (no baseline and no min_busbw floor: bandwidth not judged)"
            )
        return f"{word} {name}: {self._bandwidth_phrase()}"

    def _bandwidth_phrase(self) -> str:
        measured = f"busbw {self.measured_busbw:g} GB/s at {format_bytes(self.measured_bytes or 0)}"
        if self.mode is GateMode.FLOOR:
            return f"{measured} >= floor {self.floor:g} GB/s (spec validation.min_busbw)"
        assert self.baseline is not None
        return (
            f"{measured} >= {self.threshold:.4g} GB/s = {self.margin:g} x baseline "
            f"{self.baseline['busbw']:g} GB/s ({self.baseline['title']})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "collective": self.collective,
            "mode": self.mode,
            "summary": self.summary,
            "baseline": self.baseline,
            "floor": self.floor,
            "margin": self.margin,
            "threshold": self.threshold,
            "measured": None
            if self.measured_busbw is None
            else {"busbw": self.measured_busbw, "size": self.measured_bytes, "half": self.measured_half},
            "nodes": self.nodes,
            "instance_type": self.instance_type,
            "checks": [check.to_json() for check in self.checks],
        }


def judge(test: TestResult, config: GateConfig, catalog: Catalog | None = None) -> Verdict:
    """Judge one test against ``config``; never raises for a bad result, only says why it fails."""
    collective = test.collective
    checks: list[Check] = []
    if config.collective and test.collective_source in (None, "row shape"):
        collective = config.collective
        checks.append(Check("collective", INFO, f"collective set to {collective} by the caller"))
    elif test.collective_source == "row shape":
        checks.append(Check("collective", WARN, f"the log does not name the test: {test.collective_note}"))
    elif collective is None:
        checks.append(Check("collective", WARN, test.collective_note or "the collective is unknown"))

    _correctness(test, config, checks)
    _transport(test, config, checks)
    verdict = Verdict(passed=True, collective=collective, mode=GateMode.CORRECTNESS_ONLY, checks=checks)
    _bandwidth(test, collective, config, catalog or load_catalog(), verdict)
    if test.elided:
        checks.append(Check("completeness", INFO, "rows were left out of this log by whoever copied it"))
    verdict.passed = not verdict.failures
    return verdict


# ---- correctness ----------------------------------------------------------------------------------


def _correctness(test: TestResult, config: GateConfig, checks: list[Check]) -> None:
    if test.failures:
        more = f" (and {len(test.failures) - 1} more)" if len(test.failures) > 1 else ""
        checks.append(Check("failures", FAIL, f"the run failed: {test.failures[0]}{more}"))
    if not test.rows:
        checks.append(Check("rows", FAIL, "the table has no rows: nothing was measured"))
        return
    if test.out_of_bounds:
        checks.append(
            Check("out_of_bounds", FAIL, f"{test.out_of_bounds} out-of-bounds values: results were wrong")
        )
    elif test.out_of_bounds is None:
        status = FAIL if config.require_complete else WARN
        checks.append(
            Check(
                "out_of_bounds",
                status,
                "no 'Out of bounds values' line: the run's own error count is unknown",
            )
        )
    else:
        checks.append(Check("out_of_bounds", PASS, "0 out-of-bounds values"))
    wrong_rows = [row for row in test.rows if _wrong(row)]
    if wrong_rows:
        shown = ", ".join(f"{format_bytes(row.size)} ({_wrong(row)})" for row in wrong_rows[:4])
        more = f" and {len(wrong_rows) - 4} more rows" if len(wrong_rows) > 4 else ""
        checks.append(
            Check(
                "wrong",
                FAIL,
                f"#wrong > 0 in {len(wrong_rows)} rows, {test.wrong_total} elements in all: {shown}{more} "
                "(data corruption: a GPU, NVLink or NIC returns bad data)",
            )
        )
    elif test.legacy_error_column:
        checks.append(Check("wrong", INFO, "legacy log: correctness judged by the out-of-bounds count only"))
    elif test.wrong_total is None:
        checks.append(
            Check("wrong", WARN, "every #wrong is N/A: the run did not check its data (run with -c 1)")
        )
    else:
        checks.append(Check("wrong", PASS, "#wrong is 0 in every row"))
    if test.avg_busbw_status == "FAILED":
        checks.append(Check("avg_busbw", FAIL, "nccl-tests' own NCCL_TESTS_MIN_BW check says FAILED"))
    if test.truncated:
        status = FAIL if config.require_complete else WARN
        checks.append(Check("completeness", status, "the log stops before the run's summary lines"))


def _wrong(row: Row) -> int:
    return sum(half.wrong or 0 for half in (row.oop, row.ip) if half is not None)


# ---- transport ------------------------------------------------------------------------------------


def _inside(config: GateConfig) -> str:
    """What a transport failure means when the ranks ran inside the user's image."""
    if not config.container_image:
        return ""
    return (
        f". The ranks ran inside the container image {config.container_image}: its NCCL did not use the "
        "fabric, so jobs in this image would be slow; the image needs NCCL able to load the fabric's network "
        "plugin (the host's, which roles/containers mounts, or the image's own) and the fabric's devices"
    )


def _transport(test: TestResult, config: GateConfig, checks: list[Check]) -> None:
    seen = test.transports
    shown = ", ".join(f"{name} ({count} line{'s' if count != 1 else ''})" for name, count in seen.items())
    if len(test.hosts) == 1 and not test.devices_elided and not seen:
        checks.append(Check("transport", INFO, "one node: no network transport is used"))
        return
    if config.fabric is None:
        message = f"NCCL used {shown}" if seen else "the log does not say which network NCCL used"
        checks.append(Check("transport", INFO, message + " (no fabric given to compare with)"))
        return
    allowed = frozenset({config.transport}) if config.transport else FABRIC_TRANSPORTS[config.fabric]
    expected = " or ".join(sorted(allowed))
    if config.transport:
        expected += ", as the nodes' NCCL environment file configured"
    if not seen:
        status = FAIL if config.require_transport else WARN
        checks.append(
            Check(
                "transport",
                status,
                f"the log does not say which network NCCL used, so {config.fabric.value} ({expected}) is not "
                "confirmed: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET" + _inside(config),
            )
        )
        return
    wrong = sorted(set(seen) - allowed)
    if wrong:
        evidence = next((line for line in test.transport_evidence if any(w in line for w in wrong)), None)
        evidence = strip_prefix(evidence or (test.transport_evidence[0] if test.transport_evidence else ""))
        checks.append(
            Check(
                "transport",
                FAIL,
                f"WRONG TRANSPORT: NCCL used {', '.join(wrong)}, but the fabric is {config.fabric.value}, "
                f"which needs {expected} (seen: {shown}; e.g. '{evidence}'); {_TRANSPORT_FIX[config.fabric]}"
                + _inside(config),
            )
        )
        return
    checks.append(Check("transport", PASS, f"NCCL used {shown}, as {config.fabric.value} needs"))


# ---- bandwidth ------------------------------------------------------------------------------------


def node_count(test: TestResult, config: GateConfig, catalog: Catalog) -> int | None:
    """Nodes in the run: given, else the hosts in the device list, else ranks / GPUs per node."""
    if config.nodes:
        return config.nodes
    if test.hosts and not test.devices_elided:
        return len(test.hosts)
    item = catalog.get(config.instance_type) if config.instance_type else None
    if item is not None and item.gpu_count and test.ranks and test.ranks % item.gpu_count == 0:
        return test.ranks // item.gpu_count
    return None


def _baseline_json(baseline: Baseline, catalog: Catalog) -> dict[str, Any]:
    source = catalog.sources.get(baseline.source)
    return {
        "busbw": baseline.busbw_gbps,
        "message_bytes": baseline.message_bytes,
        "nodes": baseline.nodes,
        "source": baseline.source,
        "title": source.title if source else baseline.source,
        "url": source.url if source else None,
        "note": baseline.note,
    }


def _bandwidth(
    test: TestResult, collective: str | None, config: GateConfig, catalog: Catalog, verdict: Verdict
) -> None:
    checks = verdict.checks
    nodes = node_count(test, config, catalog)
    verdict.nodes, verdict.instance_type = nodes, config.instance_type
    floor = config.min_busbw.get(collective) if collective else None
    baseline = None
    if config.instance_type and collective:
        if nodes is None:
            checks.append(
                Check(
                    "bandwidth", WARN, "the node count is unknown, so no baseline was looked up: pass --nodes"
                )
            )
        else:
            baseline = catalog.baseline(config.instance_type, nodes, collective)
    if baseline is not None:
        verdict.baseline = _baseline_json(baseline, catalog)
    if floor is not None:
        verdict.mode, verdict.floor, verdict.threshold = GateMode.FLOOR, floor, floor
    elif baseline is not None:
        verdict.mode, verdict.margin = GateMode.BASELINE, config.margin
        verdict.threshold = baseline.busbw_gbps * config.margin
    else:
        where = (
            f"{nodes} x {config.instance_type}"
            if config.instance_type
            else "this run (no instance type given)"
        )
        checks.append(
            Check(
                "bandwidth",
                INFO,
                f"CORRECTNESS ONLY: no catalog baseline for {collective or 'this collective'} on {where} and "
                "no min_busbw floor, so bus bandwidth is not judged",
            )
        )
        return
    large = [row for row in test.rows if row.size >= config.gate_min_bytes and row.busbw is not None]
    if not large:
        biggest = max((row.size for row in test.rows), default=0)
        checks.append(
            Check(
                "bandwidth",
                FAIL,
                f"no row at or above gate_min_bytes {format_bytes(config.gate_min_bytes)} (largest measured: "
                f"{format_bytes(biggest)}): bandwidth cannot be judged; run up to at least that size (-e)",
            )
        )
        return
    sizes = {row.size for row in large}
    if baseline is not None and floor is None and baseline.message_bytes in sizes:
        size = baseline.message_bytes
    else:
        size = max(sizes)
    at_size = [row for row in large if row.size == size]
    worst = min(at_size, key=lambda row: row.busbw or 0.0)
    measured = worst.busbw
    assert measured is not None and verdict.threshold is not None
    verdict.measured_busbw, verdict.measured_bytes = measured, size
    verdict.measured_half = "out-of-place" if worst.oop is not None else "in-place"
    where = f"{format_bytes(size)} (line {worst.line})" if test.format == "text" else format_bytes(size)
    if verdict.mode is GateMode.FLOOR:
        against = f"the floor {verdict.threshold:g} GB/s (spec validation.min_busbw.{collective})"
    else:
        assert verdict.baseline is not None
        against = (
            f"{verdict.threshold:.4g} GB/s = {config.margin:g} x baseline {verdict.baseline['busbw']:g} GB/s "
            f"({verdict.baseline['nodes']} nodes, {format_bytes(verdict.baseline['message_bytes'])}; "
            f"{verdict.baseline['title']})"
        )
    if measured >= verdict.threshold:
        checks.append(Check("bandwidth", PASS, f"busbw {measured:g} GB/s at {where} reaches {against}"))
    else:
        checks.append(Check("bandwidth", FAIL, f"busbw {measured:g} GB/s at {where} is below {against}"))


def judge_all(tests: list[TestResult], config: GateConfig, catalog: Catalog | None = None) -> list[Verdict]:
    catalog = catalog or load_catalog()
    return [judge(test, config, catalog) for test in tests]
