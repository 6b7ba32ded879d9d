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
   figure is the busbw at the expected figure's message size and placement (out-of-place unless the
   baseline says in-place) when the log has that size, else at the largest measured size at or above the
   threshold (never the average over all sizes). The expected figure E is, in this order: the spec's
   explicit ``min_busbw[collective]`` (a floor), the user's own site baseline from the ledger
   (``validation.baseline: ledger``), the catalog's published baseline for the type, collective and the
   nearest node count (said when the node count differs), else ``f x bound``: the physical bound of the
   fabric (``bound.py``) times the fraction of its bound a published run on a comparable fabric reached.
   Three tiers, as Microsoft gates its fleet: PASS at or above ``margin x E`` (the vendor's own warn
   threshold where it publishes one); WARN below that but at or above the drain floor
   (``drain_fraction x E``, or the vendor's drain threshold): the suite re-runs the collective once and
   the re-run decides; FAIL below the drain floor, which starts the bisection. An explicit floor is the
   pass threshold, its drain floor ``drain_fraction / margin`` x floor. Only a run on one node, or a type
   with neither a GPU nor a known fabric, is judged for correctness only, and the verdict says so.
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
from gpufleet.validate.bound import Bound, bound, derived_expectation
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
    LEDGER = "site-baseline"  # margin x the user's own passing runs (validation.baseline: ledger)
    BOUND = "bound"  # margin x f x the physical bound (no published baseline for the type)
    CORRECTNESS_ONLY = "correctness-only"  # one node, or no GPU and no known fabric: bandwidth not judged


@dataclass(frozen=True)
class SiteBaseline:
    """The user's own expected figure for a collective, derived from the ledger (``ledger.py``)."""

    busbw: float
    message_bytes: int
    runs: int
    title: str


@dataclass(frozen=True)
class GateConfig:
    """What a result is judged against. ``from_spec`` builds it from the spec's ``validation`` block."""

    gate_min_bytes: int = 1 << 30
    margin: float = 0.9
    drain_fraction: float = 0.67
    min_busbw: Mapping[str, float] = field(default_factory=dict)
    # The user's own expected figures per collective (validation.baseline: ledger): before the catalog's.
    site_baselines: Mapping[str, SiteBaseline] = field(default_factory=dict)
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
            "drain_fraction": validation.drain_fraction,
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
    expected: float | None = None  # E: the figure a healthy cluster reaches
    drain_below: float | None = None  # below it: FAIL (bisection, drain); between it and threshold: WARN
    bound: Bound | None = None
    derived_from: str | None = None  # BOUND mode: the published run whose fraction of its bound set E
    extrapolated: str | None = None  # the baseline's node count or placement differs from the run's
    rerun_of: dict[str, Any] | None = None  # the first run's figure, when this verdict is a WARN's re-run
    transport_used: str | None = None  # what NCCL chose, as the log says
    transport_expected: str | None = None  # what the fabric (or the nodes' NCCL env file) needs

    @property
    def tier(self) -> Severity:
        """PASS, WARN (below the pass threshold, above the drain floor: re-run once) or FAIL."""
        if self.failures:
            return FAIL
        return WARN if any(c.name == "bandwidth" and c.status == WARN for c in self.checks) else PASS

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == FAIL]

    @property
    def warnings(self) -> list[Check]:
        return [check for check in self.checks if check.status == WARN]

    @property
    def why(self) -> str:
        """The reason for the verdict in one line: the transport failure first, then the other failures."""
        failures = sorted(self.failures, key=lambda check: check.name != "transport")
        if failures:
            return "; ".join(check.message for check in failures)
        bandwidth = next((c for c in self.checks if c.name == "bandwidth"), None)
        if bandwidth is not None:
            return bandwidth.message
        return "correctness only: one node, or no GPU and no known fabric (bandwidth not judged)"

    @property
    def summary(self) -> str:
        word = self.tier.value.upper()
        return f"{word} {self.collective or 'unknown collective'}: {self.why}"

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
            "tier": self.tier.value,
            "expected": self.expected,
            "drain_below": self.drain_below,
            "bound": self.bound.to_json() if self.bound else None,
            "derived_from": self.derived_from,
            "extrapolated": self.extrapolated,
            "rerun_of": self.rerun_of,
            "transport": {"used": self.transport_used, "expected": self.transport_expected},
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
    verdict.transport_used = test.transport
    if config.fabric is not None:
        verdict.transport_expected = config.transport or " or ".join(sorted(FABRIC_TRANSPORTS[config.fabric]))
    _bandwidth(test, collective, config, catalog or load_catalog(), verdict)
    if test.elided:
        checks.append(Check("completeness", INFO, "rows were left out of this log by whoever copied it"))
    verdict.passed = verdict.tier is PASS
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
        "placement": baseline.placement,
        "versions": {"nccl": baseline.nccl, "plugin": baseline.plugin, "driver": baseline.driver},
        "scheduler": baseline.scheduler,
        "provider_note": baseline.provider_note,
        "source": baseline.source,
        "title": source.title if source else baseline.source,
        "url": source.url if source else None,
        "note": baseline.note,
    }


@dataclass
class _Expectation:
    """What the bandwidth is held to: the expected figure, the pass threshold and the drain floor."""

    mode: GateMode
    expected: float
    threshold: float
    drain_below: float
    size: int | None  # the message size the figure was read at, when known
    placement: str  # out-of-place or in-place
    against: str  # how the reader is told what it was judged against


def _expect(
    collective: str | None, nodes: int | None, config: GateConfig, catalog: Catalog, verdict: Verdict
) -> _Expectation | None:
    checks = verdict.checks
    margin, drain = config.margin, config.drain_fraction
    item = catalog.get(config.instance_type) if config.instance_type else None
    if item is not None and collective and nodes is not None:
        verdict.bound = bound(item, collective, nodes)
    floor = config.min_busbw.get(collective) if collective else None
    if floor is not None:
        verdict.floor = floor
        return _Expectation(
            GateMode.FLOOR,
            floor,
            floor,
            floor * drain / margin,
            None,
            "out-of-place",
            f"the floor {floor:g} GB/s (spec validation.min_busbw.{collective})",
        )
    if not collective:
        return None
    site = config.site_baselines.get(collective)
    if site is not None:
        return _Expectation(
            GateMode.LEDGER,
            site.busbw,
            margin * site.busbw,
            drain * site.busbw,
            site.message_bytes,
            "out-of-place",
            f"{margin * site.busbw:.4g} GB/s = {margin:g} x site baseline {site.busbw:g} GB/s ({site.title})",
        )
    if item is None:
        return None
    if nodes is None:
        checks.append(
            Check("bandwidth", WARN, "the node count is unknown, so no baseline was looked up: pass --nodes")
        )
        return None
    baseline = catalog.baseline(item.name, nodes, collective)
    if baseline is not None:
        verdict.baseline = _baseline_json(baseline, catalog)
        verdict.margin = margin
        # A figure from another node count is scaled by the ratio of the two bounds where this run's is
        # lower (2 nodes' tree bound to the ring bound of 3 or more): a 2-node figure above B cannot be
        # reached on 4 nodes.
        scale = 1.0
        if baseline.nodes != nodes:
            base_bound, run_bound = bound(item, collective, baseline.nodes), verdict.bound
            if base_bound is not None and run_bound is not None and run_bound.gbps < base_bound.gbps:
                scale = run_bound.gbps / base_bound.gbps
            scaled = f", scaled by the bounds' ratio {scale:.3g}" if scale != 1.0 else ""
            verdict.extrapolated = (
                f"extrapolated: the nearest published {collective} is on {baseline.nodes} nodes, this run on "
                f"{nodes}{scaled}"
            )
        expected = baseline.busbw_gbps * scale
        threshold = (baseline.warn_below_gbps or margin * baseline.busbw_gbps) * scale
        drain_below = (baseline.drain_below_gbps or drain * baseline.busbw_gbps) * scale
        tiers = "the vendor's tiers" if baseline.warn_below_gbps else f"{margin:g} x"
        who = f"; {baseline.provider_note}" if baseline.provider_note else ""
        return _Expectation(
            GateMode.BASELINE,
            expected,
            threshold,
            drain_below,
            baseline.message_bytes,
            baseline.placement,
            f"{threshold:.4g} GB/s = {tiers} baseline {baseline.busbw_gbps:g} GB/s ({baseline.nodes} nodes, "
            f"{format_bytes(baseline.message_bytes)} {baseline.placement}; {verdict.baseline['title']}{who})",
        )
    derived = derived_expectation(catalog, item, collective, nodes)
    if derived is None:
        return None
    verdict.margin = margin
    verdict.derived_from = (
        f"no published {collective} baseline for {item.name}: expected {derived.fraction:.2f} x the bound, "
        f"the fraction {derived.reference} ({catalog.sources[derived.source].title})"
    )
    assert verdict.bound is not None
    return _Expectation(
        GateMode.BOUND,
        derived.expected,
        margin * derived.expected,
        drain * derived.expected,
        None,
        "out-of-place",
        f"{margin * derived.expected:.4g} GB/s = {margin:g} x {derived.fraction:.2f} x bound "
        f"{verdict.bound.gbps:.4g} GB/s (no published baseline; fraction from {derived.reference})",
    )


def _bandwidth(
    test: TestResult, collective: str | None, config: GateConfig, catalog: Catalog, verdict: Verdict
) -> None:
    checks = verdict.checks
    nodes = node_count(test, config, catalog)
    verdict.nodes, verdict.instance_type = nodes, config.instance_type
    expectation = _expect(collective, nodes, config, catalog, verdict)
    if expectation is None:
        if any(check.name == "bandwidth" for check in checks):
            return
        where = f"{nodes} x {config.instance_type}" if config.instance_type else "this run"
        why = "one node uses no fabric" if nodes == 1 else "the type has no GPU fabric figure to bound it"
        if not config.instance_type:
            why = "no instance type given"
        checks.append(
            Check(
                "bandwidth",
                INFO,
                f"CORRECTNESS ONLY: no baseline for {collective or 'this collective'} on {where}, no "
                f"min_busbw floor, and {why}, so bus bandwidth is not judged",
            )
        )
        # The figure is still read (at the largest size judged), for the ledger and the report.
        large = [row for row in test.rows if row.size >= config.gate_min_bytes and row.oop and row.oop.busbw]
        if large:
            top = max(row.size for row in large)
            worst = min((row for row in large if row.size == top), key=lambda row: row.busbw or 0.0)
            verdict.measured_busbw, verdict.measured_bytes = worst.busbw, top
            verdict.measured_half = "out-of-place"
        return
    verdict.mode, verdict.expected = expectation.mode, expectation.expected
    verdict.threshold, verdict.drain_below = expectation.threshold, expectation.drain_below
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
    size = expectation.size if expectation.size in sizes else max(sizes)
    if expectation.size is not None and size != expectation.size:
        note = f"read at {format_bytes(size)}, the expected figure at {format_bytes(expectation.size)}"
        verdict.extrapolated = f"{verdict.extrapolated}; {note}" if verdict.extrapolated else note
    at_size = [row for row in large if row.size == size]

    def figure(row: Row) -> tuple[float, str]:
        half = row.ip if expectation.placement == "in-place" and row.ip is not None else row.oop
        half = half if half is not None else row.ip
        busbw = half.busbw if half is not None and half.busbw is not None else row.busbw or 0.0
        return busbw, "in-place" if half is row.ip and row.ip is not None else "out-of-place"

    worst = min(at_size, key=lambda row: figure(row)[0])
    measured, placement = figure(worst)
    verdict.measured_busbw, verdict.measured_bytes, verdict.measured_half = measured, size, placement
    where = f"{format_bytes(size)} (line {worst.line})" if test.format == "text" else format_bytes(size)
    limit = verdict.bound
    if limit is not None and measured > limit.gbps * 1.02 and not limit.in_network:
        checks.append(
            Check(
                "bound",
                INFO,
                f"busbw {measured:g} GB/s is above the fabric's bound {limit.gbps:.4g} GB/s "
                f"({limit.formula}): the catalog's fabric figure or the node count may be wrong",
            )
        )
    against = expectation.against
    if verdict.extrapolated:
        against += f" [{verdict.extrapolated}]"
    if measured >= expectation.threshold:
        checks.append(Check("bandwidth", PASS, f"busbw {measured:g} GB/s at {where} reaches {against}"))
    elif measured >= expectation.drain_below:
        checks.append(
            Check(
                "bandwidth",
                WARN,
                f"busbw {measured:g} GB/s at {where} is below {against} but above the drain floor "
                f"{expectation.drain_below:.4g} GB/s: re-run once",
            )
        )
    else:
        checks.append(
            Check(
                "bandwidth",
                FAIL,
                f"busbw {measured:g} GB/s at {where} is below {against} and below the drain floor "
                f"{expectation.drain_below:.4g} GB/s",
            )
        )


def judge_all(tests: list[TestResult], config: GateConfig, catalog: Catalog | None = None) -> list[Verdict]:
    catalog = catalog or load_catalog()
    return [judge(test, config, catalog) for test in tests]
