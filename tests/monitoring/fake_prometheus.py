"""A fake Prometheus HTTP API for tests: a real HTTP server that answers ``/api/v1/query_range`` and
``/api/v1/query`` in Prometheus's shape (https://prometheus.io/docs/prometheus/latest/querying/api/,
read 2026-11-24), including what makes it awkward: values are strings, times are floats, a range is
sampled at start + k * step up to end inclusive, an unknown query is a 400 ``bad_data`` error, and a
series with no sample in the range is left out of the result.

The series are given per query expression as functions of time (``None``: no sample then), i.e. what
Prometheus would have evaluated, not what the client expects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

SeriesFn = Callable[[float], float | None]
Answers = dict[str, list[tuple[dict[str, str], SeriesFn]]]


def _fmt(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


class _Handler(BaseHTTPRequestHandler):
    answers: Answers  # set per server by fake_prometheus
    seen: list[dict[str, str]]

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
        if query not in self.answers:
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
            start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
            times = []
            t = start
            while t <= end + 1e-9:
                times.append(t)
                t += step
            for labels, fn in self.answers[query]:
                values = [[round(t, 3), _fmt(v)] for t in times if (v := fn(t)) is not None]
                if values:
                    result.append({"metric": labels, "values": values})
            self._send(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})
            return
        at = float(params.get("time", "0"))
        for labels, fn in self.answers[query]:
            v = fn(at)
            if v is not None:
                result.append({"metric": labels, "value": [at, _fmt(v)]})
        self._send(200, {"status": "success", "data": {"resultType": "vector", "result": result}})


@contextmanager
def fake_prometheus(answers: Answers) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A running fake; yields its base URL and the list of requests it saw."""
    handler = type("Handler", (_Handler,), {"answers": answers, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()
