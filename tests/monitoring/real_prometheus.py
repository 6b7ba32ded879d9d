"""A real Prometheus for tests: Debian's ``prometheus`` (2.42 on bookworm, the version the clusters run),
started on a free local port with an empty data folder, and fed what its scrapes would have stored.

The series go in through Prometheus's own remote-write receiver (``--web.enable-remote-write-receiver``,
``POST /api/v1/write``), which appends them to the TSDB as a scrape does, at the times given, with
staleness markers where a scrape stopped seeing a series. So queries see the engine's own lookback and
staleness (a series gone from a scrape vanishes at once; one never marked stale lingers 5 minutes),
which TSDB blocks made with ``promtool tsdb create-blocks-from openmetrics`` cannot hold (OpenMetrics text
has no staleness marker).

The wire format is Prometheus's (prometheus/prometheus, read 2026-11-27):
- ``prompb/remote.proto``: ``WriteRequest { repeated TimeSeries timeseries = 1; }``;
  ``prompb/types.proto``: ``TimeSeries { repeated Label labels = 1; repeated Sample samples = 2; }``,
  ``Label { string name = 1; string value = 2; }``, ``Sample { double value = 1; int64 timestamp = 2; }``
  (milliseconds), encoded here by hand (protobuf's wire format: a key ``field << 3 | wire type``, then a
  varint, 8 little-endian bytes for a double, or a length and the bytes);
- the body is snappy's block format (github.com/google/snappy ``format_description.txt``: the length as a
  varint, then elements; here literals only, which every decoder reads) with the headers
  ``Content-Encoding: snappy``, ``Content-Type: application/x-protobuf`` and
  ``X-Prometheus-Remote-Write-Version: 0.1.0`` (docs/specs/remote_write_spec.md);
- a staleness marker is the NaN with bits ``0x7ff0000000000002`` (``model/value/value.go``, StaleNaN).

The head refuses a sample older than an hour before its newest one (out of bounds) and, per series, one
not after the last (out of order), so ``write`` sends every sample in time order.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STALE_NAN_BITS = 0x7FF0000000000002
BATCH = 20_000  # samples per write request


@dataclass
class Stored:
    """One series as the TSDB holds it: its labels (``__name__`` among them) and (time in ms, value) pairs,
    a value of None being a staleness marker."""

    labels: dict[str, str]
    samples: list[tuple[int, float | None]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.labels["__name__"]


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        if not number:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _length_delimited(field_number: int, data: bytes) -> bytes:
    return _varint(field_number << 3 | 2) + _varint(len(data)) + data


def _sample(value: float | None, timestamp_ms: int) -> bytes:
    bits = struct.pack("<Q", STALE_NAN_BITS) if value is None else struct.pack("<d", value)
    return _varint(1 << 3 | 1) + bits + _varint(2 << 3 | 0) + _varint(timestamp_ms)


def write_request(series: Iterable[tuple[dict[str, str], list[tuple[int, float | None]]]]) -> bytes:
    """The protobuf ``WriteRequest`` of ``series`` (labels sorted by name, as Prometheus keeps them)."""
    out = bytearray()
    for labels, samples in series:
        body = b"".join(
            _length_delimited(1, _length_delimited(1, k.encode()) + _length_delimited(2, v.encode()))
            for k, v in sorted(labels.items())
        )
        body += b"".join(_length_delimited(2, _sample(value, t)) for t, value in samples)
        out += _length_delimited(1, body)
    return bytes(out)


def snappy_block(data: bytes) -> bytes:
    """``data`` in snappy's block format, as literals of at most 64 KiB."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 65_536):
        chunk = data[start : start + 65_536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 256:
            out += bytes((60 << 2, n))
        else:
            out += bytes((61 << 2,)) + n.to_bytes(2, "little")
        out += chunk
    return bytes(out)


@dataclass
class RealPrometheus:
    url: str
    log: Path

    def write(self, series: list[Stored]) -> None:
        """Append every sample of ``series``, in time order (the head refuses older ones)."""
        ordered = sorted(
            ((t, i, value) for i, s in enumerate(series) for t, value in s.samples),
            key=lambda item: (item[0], item[1]),
        )
        for start in range(0, len(ordered), BATCH):
            batch: dict[int, list[tuple[int, float | None]]] = {}
            for t, i, value in ordered[start : start + BATCH]:
                batch.setdefault(i, []).append((t, value))
            self._post(write_request((series[i].labels, samples) for i, samples in batch.items()))

    def _post(self, request: bytes) -> None:
        headers = {
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        }
        post = urllib.request.Request(
            f"{self.url}/api/v1/write", data=snappy_block(request), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(post, timeout=30) as response:
                assert response.status in (200, 204), response.status
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"Prometheus refused the samples ({exc.code}): {exc.read()!r}") from None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def real_prometheus(evaluation_interval: str = "15s") -> Iterator[RealPrometheus]:
    """A running Prometheus with an empty TSDB and no scrape targets (nothing of its own reaches the TSDB but
    what ``write`` sends); stopped and removed afterwards."""
    binary = shutil.which("prometheus")
    if binary is None:  # a missing tool fails: a skip would hide the test in CI
        pytest.fail("prometheus missing: apt-get install prometheus (scripts/bootstrap.sh test installs it)")
    folder = Path(tempfile.mkdtemp(prefix="gpufleet-prometheus-"))
    config = folder / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {evaluation_interval}\n  evaluation_interval: {evaluation_interval}\n",
        encoding="utf-8",
    )
    port = _free_port()
    log = folder / "prometheus.log"
    with log.open("w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-remote-write-receiver",
                "--storage.tsdb.retention.time=100y",  # keep the tests' series, whatever their age
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"prometheus not ready in 30 s: {log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        yield RealPrometheus(url, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
