"""A fake Prometheus HTTP API, kept only where no real engine answers: Prometheus 3.x's left-open ranges
(tests/monitoring/test_utilization.py; Debian 12 ships 2.42, which test_utilization_engine.py runs for
real). It answers by the query's exact text, so it cannot tell right PromQL from wrong: never test a query
with it.

A real HTTP server that answers ``/api/v1/query_range`` and
``/api/v1/query`` in Prometheus's shape (https://prometheus.io/docs/prometheus/latest/querying/api/,
read 2026-11-24), including what makes it awkward: values are strings, times are floats, a range is
sampled at start + k * step up to end inclusive, an unknown query is a 400 ``bad_data`` error, and a
series with no sample in the range is left out of the result.

The series are given per query expression as functions of time (``None``: no sample then), i.e. what
Prometheus would have evaluated, not what the client expects.

A range query of more than 11,000 steps is refused as Prometheus refuses it (``end.Sub(start)/step >
11000``, web/api/v1/api.go, prometheus/prometheus, read 2026-11-24).

A subquery wrapped in ``sum_over_time``, ``sum_over_time((EXPR)[<range>:<resolution>])``, is evaluated the way
Prometheus evaluates it at time t (promql/engine.go, case *parser.SubqueryExpr, prometheus/prometheus, read
2026-11-24): EXPR (one of the given expressions) at every multiple of the resolution from the first one at
or after t - range (2.x; after it, left-open, from 3.0: CHANGELOG 3.0.0, #13904) up to t, in milliseconds,
and the values of each series summed; a series with no value in the window has no point at t. The
resolution, when left out, is the global evaluation interval (docs/querying/basics.md, "Subquery").
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SeriesFn = Callable[[float], float | None]
Answers = dict[str, list[tuple[dict[str, str], SeriesFn]]]


def _fmt(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


_SUBQUERY = re.compile(r"^sum_over_time\(\((?P<inner>.+)\)\[(?P<range>[0-9a-z]+):(?P<res>[0-9a-z]*)\]\)$")
_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_UNIT_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)


def _duration_ms(text: str) -> int:
    """PromQL's time durations (docs/querying/basics.md, "Time Durations")."""
    match = _DURATION.match(text)
    if not text or match is None:
        raise ValueError(f'1:1: parse error: bad duration "{text}"')
    return sum(int(n) * unit for n, unit in zip(match.groups(), _UNIT_MS, strict=True) if n)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class _Handler(BaseHTTPRequestHandler):
    answers: Answers  # set per server by fake_prometheus
    seen: list[dict[str, str]]
    left_open: bool  # Prometheus 3.x (True) or 2.x (False, Debian 12's 2.42)
    evaluation_interval_ms: int

    def _series(self, query: str) -> list[tuple[dict[str, str], SeriesFn]] | None:
        """``query``'s series as functions of unix time, or None when it is not a known query."""
        if query in self.answers:
            return self.answers[query]
        sub = _SUBQUERY.match(query)
        if sub is None or sub["inner"] not in self.answers:
            return None
        window = _duration_ms(sub["range"])
        res = _duration_ms(sub["res"]) if sub["res"] else self.evaluation_interval_ms
        left_open = self.left_open

        def summed(fn: SeriesFn) -> SeriesFn:
            def at(t: float) -> float | None:
                lower = _ms(t) - window
                first = res * (lower // res)
                if first < lower or (left_open and first == lower):
                    first += res
                found = [v for ts in range(first, _ms(t) + 1, res) if (v := fn(ts / 1000)) is not None]
                return sum(found) if found else None

            return at

        return [(labels, summed(fn)) for labels, fn in self.answers[sub["inner"]]]

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _send(self, code: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.seen.append({"path": url.path, **params})
        query = params.get("query", "")
        if url.path not in ("/api/v1/query_range", "/api/v1/query"):
            self._send(404, {"status": "error", "errorType": "not_found", "error": "not found"})
            return
        try:
            series = self._series(query)
        except ValueError as exc:
            self._send(400, {"status": "error", "errorType": "bad_data", "error": str(exc)})
            return
        if series is None:
            self._send(
                400,
                {
                    "status": "error",
                    "errorType": "bad_data",
                    "error": f'1:1: parse error: unknown query "{query}"',
                },
            )
            return
        result = []
        if url.path == "/api/v1/query_range":
            start, end, step = (
                _ms(float(params["start"])),
                _ms(float(params["end"])),
                _ms(float(params["step"])),
            )
            if (end - start) / step > 11000:
                error = "exceeded maximum resolution of 11,000 points per timeseries. "
                error += "Try decreasing the query resolution (?step=XX)"
                self._send(400, {"status": "error", "errorType": "bad_data", "error": error})
                return
            times = [ts / 1000 for ts in range(start, end + 1, step)]
            for labels, fn in series:
                values = [[round(t, 3), _fmt(v)] for t in times if (v := fn(t)) is not None]
                if values:
                    result.append({"metric": labels, "values": values})
            self._send(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})
            return
        at = float(params.get("time", "0"))
        for labels, fn in series:
            v = fn(at)
            if v is not None:
                result.append({"metric": labels, "value": [at, _fmt(v)]})
        self._send(200, {"status": "success", "data": {"resultType": "vector", "result": result}})


@contextmanager
def fake_prometheus(
    answers: Answers, *, left_open: bool = False, evaluation_interval: float = 15.0
) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A running fake; yields its base URL and the list of requests it saw. ``left_open``: range bounds as
    Prometheus 3.x has them (2.x by default, as Debian 12's 2.42 on the clusters)."""
    attributes = {
        "answers": answers,
        "seen": [],
        "left_open": left_open,
        "evaluation_interval_ms": _ms(evaluation_interval),
    }
    handler = type("Handler", (_Handler,), attributes)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()
