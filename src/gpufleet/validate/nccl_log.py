"""Read nccl-tests / rccl-tests output: the text table (every layout seen in the wild) and the ``-J`` report.

``parse_log(path_or_lines)`` returns one ``TestResult`` per test found. It reads line by line and keeps
only the table rows, so a log of any size (NCCL_DEBUG=INFO output from a thousand ranks) is read in one
pass without being held in memory.

Text layouts handled (see tests/fixtures/nccl-tests/SOURCES.md for a real example of each):

- launcher prefixes on any line: Open MPI ``[1,0]<stdout>:``, Slurm ``srun -l`` labels ``0: `` / `` 0: ``;
- headers with or without the ``redop`` and ``root`` columns, with ``#wrong`` or the legacy ``error``
  float column, and the per-iteration variant (extra columns per half are skipped);
- ``#wrong`` as a count, in ``%g`` notation, or ``N/A``; rccl's ``*`` marks on errors;
- several tests in one log; NCCL INFO/WARN lines anywhere, even inside the table;
- ``Test ... failure`` lines, and a row broken off mid-way by one;
- truncated logs (no summary lines, or a last row cut short) and author elisions (``...``,
  ``# Truncated ...`` comments), which are noted, not errors.

The collective comes from ``# Collective test starting``, else an echoed command line naming
``<collective>_perf``, else it is inferred from the row shape (the count/size ratio, the redop and root
columns and the busbw/algbw factor) and ``collective_source`` says so. The network transport comes from
NCCL_DEBUG=INFO lines (``Using network ...``, ``via NET/...``, ``NET/OFI``, ``NET/IB``, ``NET/Socket``).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

from gpufleet.errors import LogParseError
from gpufleet.validate.models import (
    TRANSPORT_COLLNET,
    TRANSPORT_FASTSOCKET,
    TRANSPORT_GIB,
    TRANSPORT_IB,
    TRANSPORT_IBEXT,
    TRANSPORT_OFI,
    TRANSPORT_SOCKET,
    TRANSPORT_TCPX,
    TRANSPORT_TCPXO,
    Device,
    Half,
    Row,
    TestResult,
)

HINT = (
    "give the whole output of an nccl-tests (or rccl-tests) binary, e.g. all_reduce_perf's stdout, or "
    "the JSON report it writes with -J FILE"
)

# ---- line prefixes --------------------------------------------------------------------------------

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_SLURM_LABEL = re.compile(r"^\s*\d+: ")


def strip_prefix(line: str) -> str:
    """Remove an Open MPI ``--tag-output`` tag and/or a Slurm ``--label`` prefix (in either order)."""
    if line.startswith("["):
        line = _MPI_TAG.sub("", line, count=1)
    if ": " in line[:12]:
        labelled = _SLURM_LABEL.sub("", line, count=1)
        if labelled is not line and labelled.startswith("["):
            labelled = _MPI_TAG.sub("", labelled, count=1)
        line = labelled
    return line


# ---- NCCL INFO lines: transport, versions, ranks ----------------------------------------------------

_USING_NETWORK = re.compile(r"Using network (\S.*?)\s*$")
_VIA_NET = re.compile(r"via NET/([^/\s][^/]*?)/")
_NRANKS = re.compile(r"\bnranks (\d+)\b")
_OFI_VERSION = re.compile(r"(?:NET/OFI Using|Initializing) aws-ofi-nccl (\S+)")
_NCCL_VERSION = re.compile(r"(?:^|\s)NCCL version (\d+\.\d+\.\d+)")
_RCCL_VERSION = re.compile(r"^RCCL version\s*:?\s*(\d+\.\d+\.\d+)")


def canonical_transport(name: str) -> str:
    """Map NCCL's network names ('AWS Libfabric', 'IBext_v8', 'GPUDirectTCPX_v7', ...) to gpufleet's."""
    key = name.strip().lower()
    if "libfabric" in key or key.startswith("ofi"):
        return TRANSPORT_OFI
    if key.startswith("ibext"):
        return TRANSPORT_IBEXT
    if key.startswith("gib"):
        return TRANSPORT_GIB
    if key in ("ib", "ib_sharp") or key.startswith("ib_"):
        return TRANSPORT_IB
    if key.startswith("fastsocket"):
        return TRANSPORT_FASTSOCKET
    if key.startswith("socket"):
        return TRANSPORT_SOCKET
    if key.startswith("gpudirecttcpx"):
        return TRANSPORT_TCPX
    if key.startswith("fastrak"):
        return TRANSPORT_TCPXO
    if key.startswith("collnet"):
        return TRANSPORT_COLLNET
    return name.strip()


class _TransportSeen:
    """Evidence of the network transport, strong (NCCL says which network it uses) and weak (init lines)."""

    __slots__ = ("evidence", "strong", "weak")

    def __init__(self) -> None:
        self.strong: Counter[str] = Counter()
        self.weak: Counter[str] = Counter()
        self.evidence: list[str] = []

    def add(self, transport: str, line: str, *, strong: bool) -> None:
        (self.strong if strong else self.weak)[transport] += 1
        if len(self.evidence) < 4 and (strong or not self.strong):
            self.evidence.append(line.strip()[:200])

    def result(self) -> dict[str, int]:
        return dict(self.strong or self.weak)

    def merge(self, other: _TransportSeen) -> None:
        self.strong.update(other.strong)
        self.weak.update(other.weak)
        for line in other.evidence:
            if len(self.evidence) < 4:
                self.evidence.append(line)


# ---- '#' lines ------------------------------------------------------------------------------------

_TESTS_VERSION = re.compile(r"nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_RCCL_TESTS_VERSION = re.compile(r"rccl-tests:\s*Version\s+(\S+)")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"Collective test concluded:\s*(\S+)")
_CONFIG_KEYS = re.compile(
    r"(nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|iters:|agg iters:|validation:|graph:|unalign:)"
    r"\s*(\d+)(?:\((\w+)\))?"
)
_DEVICE = re.compile(
    r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$"
)
_OOB = re.compile(r"^Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"^Avg bus bandwidth\s*:\s*(\S+)\s*(OK|FAILED)?")
_REDUCING = re.compile(r"^Reducing maxBytes to (\d+)")

# ---- other lines ----------------------------------------------------------------------------------

_ELISION = re.compile(r"^(?:\.{3,}|…+|<snip>|\[\.\.\.\]|\[snip\])$", re.IGNORECASE)
_FAILURE = re.compile(r"\bTest (?:\w+ )?failure\b|\bfailure \S+\.(?:cu|cc|c|cpp):\d+|\bTest NCCL failure\b")
_COMMAND = re.compile(r"(?:^|[\s/'\"=])([a-z][a-z0-9_]*?)_perf(?=$|[\s'\";)&|])")
_TIME_COLUMNS = ("time", "cputime")

ELEMENT_BYTES = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float16": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


def collective_of(test_name: str) -> str:
    """``all_reduce_perf`` -> ``all_reduce`` (any ``_perf``/``_mpi`` suffix is dropped)."""
    name = Path(test_name.strip()).name
    for suffix in ("_perf_mpi", "_perf"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# ---- table layout ---------------------------------------------------------------------------------


class _Layout:
    """Which columns a row has, read from the table header (or guessed from a row when there is none)."""

    __slots__ = ("half_len", "has_redop", "has_root", "legacy", "prefix_len")

    def __init__(self, prefix: list[str], half: list[str], *, legacy: bool | None = None) -> None:
        self.has_redop = "redop" in prefix
        self.has_root = "root" in prefix
        self.prefix_len = len(prefix)
        self.half_len = len(half)
        self.legacy = ("error" in half) if legacy is None else legacy

    @classmethod
    def from_header(cls, tokens: list[str]) -> _Layout | None:
        times = [i for i, token in enumerate(tokens) if token in _TIME_COLUMNS]
        if not times or tokens[:2] != ["size", "count"]:
            return None
        prefix = tokens[: times[0]]
        half = tokens[times[0] : times[1]] if len(times) >= 2 else tokens[times[0] :]
        if len(half) < 4 or half[1:3] != ["algbw", "busbw"] or half[3] not in ("#wrong", "error"):
            return None
        if any(name not in ("size", "count", "type", "redop", "root") for name in prefix):
            return None
        return cls(prefix, half)

    @classmethod
    def guess(cls, tokens: list[str]) -> _Layout | None:
        """Rows with no header above them: 11, 12 or 13 columns of the standard shapes."""
        count = len(tokens)
        if count >= 13:
            prefix = ["size", "count", "type", "redop", "root"]
        elif count == 12:
            prefix = (
                ["size", "count", "type", "redop"]
                if not _is_int(tokens[3])
                else ["size", "count", "type", "root"]
            )
        elif count == 11:
            prefix = ["size", "count", "type"]
        else:
            return None
        last = tokens[len(prefix) + 3]
        legacy = ("e" in last.lower() or "." in last) and last != "N/A"
        half = ["time", "algbw", "busbw", "error" if legacy else "#wrong"]
        return cls(prefix, half, legacy=legacy)


def _is_int(token: str) -> bool:
    return token.lstrip("-").isdigit()


class _RowProblem(Exception):
    """A line that starts like a table row but cannot be read as one."""

    def __init__(self, reason: str, *, failure: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.failure = failure


def _float(token: str, column: str) -> float:
    try:
        return float(token.rstrip("*"))
    except ValueError:
        raise _RowProblem(f"column '{column}' is '{token}', not a number") from None


def _parse_half(tokens: list[str], start: int, layout: _Layout) -> Half:
    time_us = _float(tokens[start], "time")
    algbw = _float(tokens[start + 1], "algbw")
    busbw = _float(tokens[start + 2], "busbw")
    last = tokens[start + 3]
    if layout.legacy:
        return Half(time_us, algbw, busbw, None, _float(last, "error"))
    if last == "N/A":
        return Half(time_us, algbw, busbw, None)
    wrong = _float(last, "#wrong")
    if wrong < 0 or wrong != int(wrong):
        raise _RowProblem(f"column '#wrong' is '{last}', not a count")
    return Half(time_us, algbw, busbw, int(wrong))


def parse_row(text: str, layout: _Layout, line: int) -> Row:
    """Parse one table row with ``layout``; raises ``_RowProblem`` with the reason when it does not fit."""
    tokens = text.split()
    prefix_len = layout.prefix_len
    if len(tokens) < prefix_len:
        raise _RowProblem(f"only {len(tokens)} columns, the header has {prefix_len + 2 * layout.half_len}")
    try:
        size = int(tokens[0])
        count = int(tokens[1])
    except ValueError:
        raise _RowProblem("size and count must be whole numbers") from None
    type_name = tokens[2] if prefix_len >= 3 else ""
    index = 3
    redop = root = None
    if layout.has_redop:
        redop = tokens[index]
        index += 1
    if layout.has_root:
        if not _is_int(tokens[index]):
            raise _RowProblem(f"column 'root' is '{tokens[index]}', not a rank number")
        root = int(tokens[index])
        index += 1
    rest = tokens[index:]
    if rest and not _looks_numeric(rest[0]):
        tail = text.split(None, prefix_len)[-1] if len(tokens) > prefix_len else ""
        if _FAILURE.search(tail):
            raise _RowProblem("the row breaks off", failure=tail.strip())
    need = 2 * layout.half_len
    if len(rest) < need:
        raise _RowProblem(
            f"{prefix_len + len(rest)} columns, the header has {prefix_len + need}: the row is cut short"
        )
    extra = rest[need:]
    if extra and all(_looks_numeric(token) for token in extra):
        raise _RowProblem(
            f"{prefix_len + len(rest)} columns, the header has {prefix_len + need}: "
            "the row does not match the header"
        )
    oop = _parse_half(rest, 0, layout)
    ip = _parse_half(rest, layout.half_len, layout)
    return Row(size, count, type_name, redop, root, oop, ip, line)


def _looks_numeric(token: str) -> bool:
    if token == "N/A":
        return True
    try:
        float(token.rstrip("*"))
    except ValueError:
        return False
    return True


# ---- the parser -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, name: str) -> None:
        self.name = name
        self.tests: list[TestResult] = []
        self.file_transport = _TransportSeen()
        self.file_versions: dict[str, str] = {}
        self.lineno = 0
        self.warnings = 0  # NCCL WARN lines kept as notes (the first few only)
        self.pending_hint: str | None = None
        self._new_test()

    # -- test lifecycle --

    def _new_test(self) -> None:
        self.cur = TestResult(file=self.name)
        self.cur_transport = _TransportSeen()
        self.layout: _Layout | None = None
        self.in_devices = False
        self.in_table = False
        self.pending_problem: tuple[int, str] | None = None
        self.nranks: int | None = None
        self.hint, self.pending_hint = self.pending_hint, None

    def _touch(self) -> None:
        if not self.cur.start_line:
            self.cur.start_line = self.lineno
        self.cur.end_line = self.lineno

    def _busy(self) -> bool:
        return bool(self.cur.rows) or self.cur.has_footer or self.cur.concluded or bool(self.cur.failures)

    def _finish(self) -> None:
        test = self.cur
        if self.pending_problem:
            line, reason = self.pending_problem
            test.truncated = True
            test.notes.append(f"line {line}: last row cut short ({reason}); the log looks truncated")
        keep = test.rows or test.has_footer or test.failures or self.layout is not None or test.test_name
        if keep:
            if not test.has_footer and (test.rows or self.layout is not None) and not test.truncated:
                test.truncated = True
                test.notes.append(
                    "no 'Out of bounds' / 'Avg bus bandwidth' lines after the table: the log stops early"
                )
            test.transports = self.cur_transport.result()
            test.transport_evidence = list(self.cur_transport.evidence)
            if self.nranks and test.ranks is None:
                test.ranks, test.ranks_source = self.nranks, "nranks"
            if test.collective is None and self.hint:
                test.collective, test.collective_source = collective_of(self.hint), "command line"
                test.test_name = test.test_name or f"{self.hint}_perf"
            self.tests.append(test)
        self.file_transport.merge(self.cur_transport)
        self._new_test()

    def _start_if_busy(self) -> None:
        if self._busy():
            self._finish()

    # -- feeding lines --

    def feed(self, raw: str) -> None:
        self.lineno += 1
        if "NCCL INFO" in raw or "NCCL WARN" in raw or "NCCL TRACE" in raw:
            self._nccl_line(raw)
            return
        line = strip_prefix(raw.rstrip("\r\n"))
        text = line.strip()
        if not text:
            return
        if text[0] == "#":
            self._comment(text)
        elif text[0].isdigit():
            self._row(text)
        elif _ELISION.match(text):
            self._elision(text)
        else:
            self._other(text)

    def _nccl_line(self, raw: str) -> None:
        seen = self.cur_transport
        if "NCCL WARN" in raw and self.warnings < 5:
            self.warnings += 1
            self.cur.notes.append(f"line {self.lineno}: {strip_prefix(raw.strip())[:200]}")
        if "Using network" in raw:
            match = _USING_NETWORK.search(raw)
            if match:
                seen.add(canonical_transport(match.group(1)), raw, strong=True)
        elif "via NET/" in raw:
            match = _VIA_NET.search(raw)
            if match:
                seen.add(canonical_transport(match.group(1)), raw, strong=True)
        elif "NET/OFI" in raw:
            seen.add(TRANSPORT_OFI, raw, strong=False)
            match = _OFI_VERSION.search(raw)
            if match and not self.cur.net_plugin:
                self.cur.net_plugin = f"aws-ofi-nccl {match.group(1)}"
        elif "NET/IB :" in raw and "Using" in raw:
            seen.add(TRANSPORT_IB, raw, strong=False)
        elif "NET/Socket :" in raw and "Using" in raw:
            seen.add(TRANSPORT_SOCKET, raw, strong=False)
        elif "P2P plugin" in raw or "NET/Plugin" in raw:
            match = re.search(r"P2P plugin (\S+)", raw)
            if match and not self.cur.net_plugin:
                self.cur.net_plugin = match.group(1)
        if "nranks" in raw:
            match = _NRANKS.search(raw)
            if match:
                self.nranks = max(self.nranks or 0, int(match.group(1)))
        if "NCCL version" in raw and not self.cur.nccl_version:
            match = _NCCL_VERSION.search(raw)
            if match:
                self.cur.nccl_version = match.group(1)

    def _comment(self, text: str) -> None:
        body = text.lstrip("#").strip()
        if not body:
            self.in_devices = False
            return
        head = body.split(None, 1)[0]
        if head == "Rank" and self.in_devices:
            self._device(body)
            return
        if head in ("size", "(B)", "out-of-place") or body.startswith("size "):
            self._header(body)
            return
        if head == "nccl-tests":
            match = _TESTS_VERSION.search(body)
            if match:
                self._start_if_busy()
                self._touch()
                self.cur.tests_version = f"nccl-tests {match.group(1)}"
                if match.group(2) and not self.cur.nccl_version:
                    self.cur.nccl_version = _version_of_code(int(match.group(2)))
            return
        if head == "Collective":
            match = _STARTING.search(body)
            if match:
                if self._busy() or (self.cur.test_name and self.layout is not None):
                    self._finish()
                self._touch()
                self.cur.test_name = match.group(1)
                self.cur.collective = collective_of(match.group(1))
                self.cur.collective_source = "test name"
                return
            match = _CONCLUDED.search(body)
            if match:
                self._touch()
                self.cur.concluded = True
                if not self.cur.test_name:
                    self.cur.test_name = match.group(1)
                    self.cur.collective = collective_of(match.group(1))
                    self.cur.collective_source = "test name"
                self._finish()
            return
        if head == "nThread":
            if self._busy() or self.cur.config:
                self._finish()
            self._touch()
            self.cur.config = _parse_config(body)
            return
        if body.startswith("Using devices"):
            if self._busy():
                self._finish()
            self._touch()
            self.in_devices = True
            return
        if head == "Out":
            match = _OOB.match(body)
            if match:
                self._touch()
                self.cur.out_of_bounds = int(match.group(1))
                self._close_table()
                return
        if head == "Avg":
            match = _AVG.match(body)
            if match:
                self._touch()
                try:
                    self.cur.avg_busbw = float(match.group(1))
                except ValueError:
                    self._problem(f"'Avg bus bandwidth' reads '{match.group(1)}', not a number")
                self.cur.avg_busbw_status = match.group(2)
                self._close_table()
                return
        if head == "Errors" and "asterisks" in body:
            return
        if head == "Reducing":
            match = _REDUCING.match(body)
            if match:
                self.cur.notes.append(f"nccl-tests lowered maxBytes to {match.group(1)} (GPU memory)")
            return
        if head == "error:":
            self._touch()
            self.cur.failures.append(body)
            return
        if body.startswith("Writing JSON output to"):
            self.cur.notes.append(body)
            return
        if head in ("Blocking", "Parallel", "GPU", "Per-Iteration", "skipping"):
            return
        if self.in_table:
            # An author's comment inside the table, e.g. '# Truncated  smaller message sizes'.
            self.cur.elided = True
            self.cur.notes.append(f"line {self.lineno}: comment inside the table: {body[:120]}")

    def _device(self, body: str) -> None:
        match = _DEVICE.match(body)
        if not match:
            self.cur.notes.append(f"line {self.lineno}: device line not understood: {body[:120]}")
            return
        self._touch()
        rank, pid, host, device, name = match.groups()
        self.cur.devices.append(Device(int(rank), host, int(device), int(pid), name.strip()))

    def _header(self, body: str) -> None:
        tokens = body.split()
        if tokens[0] in ("(B)", "out-of-place"):
            return  # the units line and the line naming the halves carry nothing new
        layout = _Layout.from_header(tokens)
        if layout is None:
            raise LogParseError(
                f"{self.name}: line {self.lineno}: table header not understood: '#  {body[:160]}' "
                "(expected 'size count type [redop] [root] time algbw busbw #wrong time algbw busbw "
                "#wrong')",
                hint=HINT,
            )
        if self._busy():
            self._finish()
        self._touch()
        self.in_devices = False
        self._use_layout(layout)

    def _use_layout(self, layout: _Layout) -> None:
        self.layout = layout
        self.in_table = True
        self.cur.legacy_error_column = layout.legacy

    def _close_table(self) -> None:
        if self.pending_problem:
            line, reason = self.pending_problem
            self._problem(reason, line)
        self.in_table = False

    def _problem(self, reason: str, line: int | None = None) -> NoReturn:
        raise LogParseError(f"{self.name}: line {line or self.lineno}: {reason}", hint=HINT)

    def _row(self, text: str) -> None:
        if self.cur.has_footer and self.layout is not None:
            layout = self.layout  # rows after a summary, with no new header: a new run, same columns
            self._finish()
            self._use_layout(layout)
        if not self._looks_like_row(text):
            self._other(text)  # e.g. an IP address or a date on a line of its own
            return
        if self.layout is None:
            tokens = text.split()
            guessed = _Layout.guess(tokens) if len(tokens) >= 11 else None
            if guessed is None:
                self._problem(
                    f"a table row with no table header above it, and {len(tokens)} columns: '{text[:120]}'"
                )
            self._use_layout(guessed)
            self.cur.notes.append(
                f"line {self.lineno}: rows with no table header; columns guessed from the row"
            )
        if self.pending_problem:
            line, reason = self.pending_problem
            self._problem(reason, line)
        assert self.layout is not None
        try:
            row = parse_row(text, self.layout, self.lineno)
        except _RowProblem as problem:
            self._touch()
            if problem.failure is not None:
                size = text.split()[0]
                self.cur.failures.append(
                    f"line {self.lineno}: the row for {size} B broke off: {problem.failure}"
                )
                return
            self.pending_problem = (
                self.lineno,
                f"table row not understood: {problem.reason}: '{text[:140]}'",
            )
            return
        self._touch()
        self.in_table = True
        self.cur.rows.append(row)

    @staticmethod
    def _looks_like_row(text: str) -> bool:
        tokens = text.split(None, 2)
        return len(tokens) >= 2 and tokens[0].isdigit() and tokens[1].isdigit()

    def _elision(self, text: str) -> None:
        if self.in_devices:
            self.cur.devices_elided = True
            return
        if self.in_table:
            self.cur.elided = True
        self.cur.notes.append(f"line {self.lineno}: lines left out by whoever copied the log ('{text[:20]}')")

    def _other(self, text: str) -> None:
        if _FAILURE.search(text):
            self._touch()
            self.cur.failures.append(f"line {self.lineno}: {text[:300]}")
            return
        if text.startswith("NCCL version") or text.startswith("RCCL version"):
            match = _NCCL_VERSION.search(text) or _RCCL_VERSION.search(text)
            if match:
                version = match.group(1)
                version = f"rccl {version}" if text.startswith("RCCL") else version
                if not self.cur.nccl_version:
                    self.cur.nccl_version = version
                self.file_versions.setdefault("nccl", version)
            return
        if text.startswith("rccl-tests"):
            match = _RCCL_TESTS_VERSION.search(text)
            if match:
                self.cur.tests_version = f"rccl-tests {match.group(1)}"
            return
        if "_perf" in text:
            match = _COMMAND.search(text)
            if match:
                name = match.group(1)
                if self._busy():
                    self.pending_hint = name
                else:
                    self.hint = name

    # -- end of input --

    def close(self) -> list[TestResult]:
        self._finish()
        if not self.tests:
            where = f"line {self.lineno} (end of file)" if self.lineno else "line 1"
            empty = "the file is empty" if self.lineno == 0 else "no nccl-tests result table found"
            raise LogParseError(
                f"{self.name}: {where}: {empty} "
                "(looked for the '#  size  count  type ...' header and its rows)",
                hint=HINT,
            )
        for test in self.tests:
            _complete(test, self.file_transport, self.file_versions.get("nccl"))
        return self.tests


def _complete(
    test: TestResult, file_transport: _TransportSeen | None = None, nccl: str | None = None
) -> None:
    """Fill what a test's own lines did not say: file-wide transport and version, ranks, hosts, collective."""
    if file_transport is not None and not test.transports and file_transport.result():
        test.transports = file_transport.result()
        test.transport_evidence = list(file_transport.evidence)
    test.nccl_version = test.nccl_version or nccl
    if test.devices:
        ranks = {device.rank for device in test.devices}
        count = max(ranks) + 1
        if len(ranks) != count:
            test.devices_elided = True
        test.ranks, test.ranks_source = count, "devices"
        test.hosts = list(dict.fromkeys(device.host for device in test.devices))
    if test.collective is None or test.ranks is None:
        _infer_from_rows(test)
    if not test.rows and not test.failures:
        test.notes.append("the table has no rows")


def _version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE (e.g. 22902) -> '2.29.2'; codes below 10000 use the old 1000/100 scheme."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _parse_config(body: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, value, unit in _CONFIG_KEYS.findall(body):
        name = key.rstrip(":").replace(" ", "_")
        config[name] = int(value)
        if unit:
            config["step_unit"] = unit
    return config


# ---- collective inference -------------------------------------------------------------------------


def _infer_from_rows(test: TestResult) -> None:
    """Fill ``collective`` and/or ``ranks`` from the shape of the rows, saying that they were inferred."""
    ratios: Counter[int] = Counter()
    for row in test.rows:
        element = ELEMENT_BYTES.get(row.type)
        if not element or row.size <= 0 or row.count <= 0:
            continue
        ratio, remainder = divmod(row.size, row.count * element)
        if remainder == 0:
            ratios[ratio] += 1
    factor = _busbw_factor(test)
    if not ratios:
        if test.collective is None:
            test.collective_note = "no row gives the count/size ratio: the collective is unknown"
        return
    ranked = ratios.most_common()
    ratio = ranked[0][0]
    if len(ranked) > 1:
        tied = [value for value, votes in ranked if votes == ranked[0][1]]
        if len(tied) > 1 and factor is not None:
            per_factor = _ranks_from_factor(factor, two_n=False)
            ratio = per_factor if per_factor in tied else max(tied)
        test.notes.append("rows disagree on the count/size ratio; the most common one was used")
    reducing = any(row.redop not in (None, "none") for row in test.rows)
    rooted = any(row.root is not None and row.root >= 0 for row in test.rows)
    has_redop_column = any(row.redop is not None for row in test.rows)
    candidates: list[str]
    ranks: int | None = None
    if ratio == 1:
        if rooted:
            candidates = ["reduce"] if reducing else ["broadcast"]
        elif has_redop_column and not reducing:
            candidates = []
        elif factor is not None and factor > 1.05:
            candidates = ["all_reduce"]
            ranks = _ranks_from_factor(factor, two_n=True)
        elif factor is not None and test.ranks and test.ranks > 2 and abs(factor - 1) < 0.05:
            candidates = ["sendrecv"]
        else:
            candidates = ["all_reduce", "sendrecv"]
    else:
        ranks = ratio
        if reducing:
            candidates = ["reduce_scatter"]
        elif rooted:
            candidates = ["gather", "scatter"]
        else:
            candidates = ["all_gather", "alltoall"]
    if test.ranks is None and ranks and ranks > 1:
        test.ranks, test.ranks_source = ranks, "row shape"
    if test.collective is not None:
        return
    if not candidates:
        test.collective_note = "the rows match no known collective's shape"
        return
    test.collective = candidates[0]
    test.collective_source = "row shape"
    if len(candidates) == 1:
        test.collective_note = f"inferred from the row shape (count/size ratio {ratio})"
    else:
        test.collective_note = (
            f"inferred from the row shape: {' or '.join(candidates)} (they print the same columns); "
            "pass --collective to set it"
        )


def _busbw_factor(test: TestResult) -> float | None:
    best = None
    for row in test.rows:
        half = row.oop or row.ip
        if half is not None and half.algbw >= 1.0 and (best is None or half.algbw > best.algbw):
            best = half
    return best.busbw / best.algbw if best else None


def _ranks_from_factor(factor: float, *, two_n: bool) -> int | None:
    """busbw/algbw is 2(n-1)/n for all_reduce and (n-1)/n for the gather/scatter family."""
    limit = 2.0 if two_n else 1.0
    gap = limit - factor
    if gap <= 0.001:
        return None
    ranks = round(limit / gap)
    return ranks if ranks >= 2 else None


# ---- the -J JSON report ---------------------------------------------------------------------------


def parse_json_report(text: str, name: str) -> list[TestResult]:
    """Read the report nccl-tests writes with ``-J FILE`` (format version 1 and 2, see util.cu)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogParseError(
            f"{name}: line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); an nccl-tests "
            "report is left unfinished when the run crashes",
            hint=HINT,
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise LogParseError(
            f"{name}: line 1: a JSON document without a 'results' list is not an nccl-tests -J report",
            hint=HINT,
        )
    test = TestResult(file=name, format="json", start_line=1, end_line=text.count("\n") + 1)
    args = data.get("args") or []
    if args:
        test.test_name = Path(str(args[0])).name
        test.collective = collective_of(test.test_name)
        test.collective_source = "command line"
    code = data.get("nccl_version")
    if isinstance(code, int):
        test.nccl_version = _version_of_code(code)
    config = data.get("config") or {}
    test.config = {key: value for key, value in config.items() if key != "devices"}
    for device in config.get("devices") or []:
        test.devices.append(
            Device(
                int(device.get("rank", 0)),
                str(device.get("hostname", "")),
                int(device.get("device", 0)),
                device.get("pid"),
                str(device.get("device_info", "")),
            )
        )
    for index, item in enumerate(data["results"]):
        try:
            test.rows.append(_json_row(item, index))
        except (KeyError, TypeError, ValueError) as exc:
            raise LogParseError(
                f"{name}: line 1: results[{index}] is not a result record ({exc})", hint=HINT
            ) from None
    bounds = data.get("out_of_bounds")
    if isinstance(bounds, dict) and "count" in bounds:
        test.out_of_bounds = int(bounds["count"])
    average = data.get("average_bus_bandwidth")
    if isinstance(average, dict) and "bandwidth" in average:
        test.avg_busbw = _json_float(average["bandwidth"])
        okay = str(average.get("okay", "unchecked"))
        test.avg_busbw_status = {"true": "OK", "false": "FAILED"}.get(okay)
    for error in data.get("errors") or []:
        if error:
            test.failures.append(f"nccl error: {error}")
    if "end_time" not in data:
        test.truncated = True
        test.notes.append("the report has no end_time: the run did not finish")
    test.notes.append("JSON reports carry no NCCL INFO lines: the transport is not recorded")
    _complete(test)
    return [test]


def _json_float(value: Any) -> float:
    return float("nan") if value == "nan" else float(value)


def _json_half(item: Any) -> Half | None:
    if item is None:
        return None
    time_us = item.get("time", item.get("cpu_time"))
    wrong = item.get("nwrong")
    return Half(
        _json_float(time_us),
        _json_float(item["alg_bw"]),
        _json_float(item["bus_bw"]),
        None if wrong is None else int(_json_float(wrong)),
    )


def _json_row(item: dict[str, Any], index: int) -> Row:
    root = str(item.get("root", "")).strip()
    return Row(
        size=int(item["size"]),
        count=int(item["count"]),
        type=str(item["type"]),
        redop=str(item["redop"]).strip() if item.get("redop") is not None else None,
        root=int(root) if root.lstrip("-").isdigit() else None,
        oop=_json_half(item.get("out_of_place")),
        ip=_json_half(item.get("in_place")),
        line=1,
    )


# ---- entry points ---------------------------------------------------------------------------------


@contextmanager
def _open(
    source: str | Path | TextIO | Iterable[str], name: str | None
) -> Iterator[tuple[Iterator[str], str]]:
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            handle = path.open("r", encoding="utf-8", errors="replace", newline=None)
        except FileNotFoundError:
            raise LogParseError(f"{path}: line 0: no such file", hint=HINT) from None
        except OSError as exc:
            raise LogParseError(f"{path}: line 0: cannot be read ({exc.strerror})", hint=HINT) from None
        with handle:
            yield iter(handle), name or str(path)
    else:
        yield iter(source), name or getattr(source, "name", None) or "<log>"


def parse_log(source: str | Path | TextIO | Iterable[str], *, name: str | None = None) -> list[TestResult]:
    """Parse an nccl-tests log (text or ``-J`` JSON) from a path, an open file or an iterable of lines.

    Raises ``LogParseError`` (file, line, why) when the input holds no result table or a row that cannot
    be read.
    """
    with _open(source, name) as (lines, label):
        blank = 0
        first = ""
        for first in lines:
            if first.strip():
                break
            blank += 1
        else:
            first = ""
        if first.lstrip().startswith("{"):
            return parse_json_report(first + "".join(lines), label)
        parser = _Parser(label)
        parser.lineno = blank
        if first:
            parser.feed(first)
        for line in lines:
            parser.feed(line)
        return parser.close()


def parse_text(text: str, *, name: str = "<text>") -> list[TestResult]:
    """Parse a log held in a string (e.g. the output srun returned)."""
    return parse_log(io.StringIO(text), name=name)
