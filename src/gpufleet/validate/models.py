"""What the nccl-tests parser produces: one ``TestResult`` per test found in a log.

Plain dataclasses (not pydantic): a 100 MB log can hold many thousands of rows and these are built on the
parser's hot path. ``to_json()`` gives the machine-readable shape ``gpufleet report --json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Canonical network transports, as gpufleet names them in reports and gates.
TRANSPORT_OFI = "OFI"  # aws-ofi-nccl over libfabric (EFA); NCCL says "AWS Libfabric" / "Libfabric"
TRANSPORT_IB = "IB"  # NCCL's built-in InfiniBand verbs transport (IB or RoCE ports)
TRANSPORT_IBEXT = "IBext"  # HPC-X nccl-rdma-sharp plugin (IB verbs)
TRANSPORT_GIB = "gIB"  # Google's RDMA plugin (A3 Ultra / A4, RoCE)
TRANSPORT_SOCKET = "Socket"  # plain TCP sockets
TRANSPORT_FASTSOCKET = "FastSocket"  # Google's NCCL Fast Socket plugin (TCP)
TRANSPORT_TCPX = "GPUDirectTCPX"  # A3 High
TRANSPORT_TCPXO = "FasTrak"  # GPUDirect-TCPXO, A3 Mega
TRANSPORT_COLLNET = "CollNet"


@dataclass(slots=True, frozen=True)
class Half:
    """One half of a row: out-of-place or in-place.

    ``wrong`` is the ``#wrong`` count, ``None`` where the log says ``N/A`` (no data check was done) or
    where the log is in the legacy format, whose last column is ``error`` (the largest relative error, a
    float) instead of a count: that value is in ``error``.
    """

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None
    error: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "time_us": self.time_us,
            "algbw": self.algbw,
            "busbw": self.busbw,
            "wrong": self.wrong,
        }
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(slots=True, frozen=True)
class Row:
    size: int
    count: int
    type: str
    redop: str | None  # None when the log's header has no redop column (legacy formats)
    root: int | None  # None when the log's header has no root column
    oop: Half | None  # None where nccl-tests printed no out-of-place half (trace replay)
    ip: Half | None
    line: int  # 1-based line in the log file

    @property
    def busbw(self) -> float | None:
        """The figure the gate judges: out-of-place busbw, else in-place."""
        half = self.oop or self.ip
        return half.busbw if half else None

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "redop": self.redop,
            "root": self.root,
            "oop": self.oop.to_json() if self.oop else None,
            "ip": self.ip.to_json() if self.ip else None,
        }


@dataclass(slots=True)
class Device:
    rank: int
    host: str
    device: int
    pid: int | None = None
    name: str = ""


@dataclass
class TestResult:
    """One nccl-tests run (one table) found in a log."""

    file: str
    start_line: int = 0
    end_line: int = 0
    format: str = "text"  # "text" or "json" (the -J report)
    test_name: str | None = None  # e.g. all_reduce_perf
    collective: str | None = None  # e.g. all_reduce
    # Where ``collective`` came from: "test name" (``# Collective test starting``), "command line"
    # (an echoed command, or the JSON report's args), "row shape" (inferred; see ``collective_note``).
    collective_source: str | None = None
    collective_note: str | None = None
    ranks: int | None = None
    ranks_source: str | None = None  # "devices", "nranks", "row shape"
    hosts: list[str] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    devices_elided: bool = False
    transports: dict[str, int] = field(default_factory=dict)  # canonical transport -> evidence lines
    transport_evidence: list[str] = field(default_factory=list)  # a few raw lines, for the report
    nccl_version: str | None = None
    tests_version: str | None = None  # "nccl-tests 2.17.8" or "rccl-tests develop:448c4c7"
    net_plugin: str | None = None  # e.g. "aws-ofi-nccl 1.5.0aws"
    config: dict[str, Any] = field(default_factory=dict)  # the "# nThread ..." line, parsed
    legacy_error_column: bool = False
    rows: list[Row] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    avg_busbw_status: str | None = None  # "OK" / "FAILED" when NCCL_TESTS_MIN_BW was set
    concluded: bool = False
    failures: list[str] = field(default_factory=list)  # "Test CUDA failure ..." lines, broken rows
    notes: list[str] = field(default_factory=list)  # elisions, truncation, odd lines that were skipped
    elided: bool = False
    truncated: bool = False

    # ---- derived ------------------------------------------------------------------------------

    @property
    def transport(self) -> str | None:
        """The transport NCCL used, or several joined with '+' when ranks disagreed."""
        if not self.transports:
            return None
        return "+".join(sorted(self.transports, key=lambda name: -self.transports[name]))

    @property
    def has_footer(self) -> bool:
        return self.out_of_bounds is not None or self.avg_busbw is not None

    @property
    def wrong_total(self) -> int | None:
        """Sum of every ``#wrong`` in the table; ``None`` when no row reported a count (N/A or legacy)."""
        total = None
        for row in self.rows:
            for half in (row.oop, row.ip):
                if half is not None and half.wrong is not None:
                    total = (total or 0) + half.wrong
        return total

    @property
    def data_checked(self) -> bool:
        """Whether the run checked its results at all (``-c 1``): some ``#wrong`` is a number, or legacy."""
        return self.legacy_error_column or self.wrong_total is not None

    def rows_at(self, size: int) -> list[Row]:
        return [row for row in self.rows if row.size == size]

    @property
    def label(self) -> str:
        return f"{self.file}:{self.start_line}" if self.start_line else self.file

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.start_line,
            "format": self.format,
            "test": self.test_name,
            "collective": self.collective,
            "collective_source": self.collective_source,
            "collective_note": self.collective_note,
            "ranks": self.ranks,
            "ranks_source": self.ranks_source,
            "hosts": self.hosts,
            "devices_elided": self.devices_elided,
            "transport": self.transport,
            "transports": self.transports,
            "nccl_version": self.nccl_version,
            "tests_version": self.tests_version,
            "net_plugin": self.net_plugin,
            "avg_busbw": self.avg_busbw,
            "out_of_bounds": self.out_of_bounds,
            "wrong_total": self.wrong_total,
            "data_checked": self.data_checked,
            "legacy_error_column": self.legacy_error_column,
            "failures": self.failures,
            "notes": self.notes,
            "elided": self.elided,
            "truncated": self.truncated,
            "rows": [row.to_json() for row in self.rows],
        }
