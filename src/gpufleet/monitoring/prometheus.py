"""A small client of Prometheus's HTTP API (``/api/v1/query_range``, ``/api/v1/query``) and the way to it.

The API's shape is Prometheus's (https://prometheus.io/docs/prometheus/latest/querying/api/, read
2026-11-24): ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...},
"values": [[<unix time>, "<value>"], ...]}]}}``; an error is ``{"status": "error", "errorType": ...,
"error": ...}`` with a 4xx/5xx code. A range query returns at most 11,000 points per series, so the step
grows with the window.

Prometheus listens on the controller (docs/monitoring.md). gpufleet reaches it through an SSH tunnel over
the cluster's own connection (the same key and options Ansible uses), or at ``GPUFLEET_PROMETHEUS_URL``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import ExitCode, GpufleetError
from gpufleet.inventory.model import Inventory

MAX_POINTS = 11_000
URL_ENV = "GPUFLEET_PROMETHEUS_URL"
DEFAULT_PORT = 9090


class PrometheusUnavailable(GpufleetError):
    """Prometheus could not be reached or refused the query (a report without utilization follows)."""

    exit_code = ExitCode.VALIDATE  # the measurement could not be carried out


class PrometheusUnreachable(PrometheusUnavailable):
    """Nothing answered at Prometheus's address; ``reason`` is what the connection said."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


# The unit roles/monitoring runs Prometheus as on the controller (roles/monitoring/vars/Debian.yml,
# __monitoring_prometheus_service: Debian's prometheus package).
SERVICE = "prometheus"


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    values: list[tuple[float, float]]  # (unix time, value)


def step_for(start: float, end: float, minimum: float = 15.0) -> float:
    """The step that keeps a range query under Prometheus's 11,000 points per series."""
    return max(minimum, (end - start) / (MAX_POINTS - 1))


# PromQL time durations: a number and a unit, units concatenated from the longest to the shortest
# (prometheus/prometheus docs/querying/basics.md, "Time Durations", read 2026-11-24).
_UNITS_MS = {"y": 365 * 86_400_000, "w": 7 * 86_400_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000}
_UNITS_MS |= {"s": 1000, "ms": 1}
_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a PromQL duration (``15s``, ``1m30s``, ``500ms``); ValueError for anything else."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"{text!r} is not a Prometheus duration (e.g. 15s, 1m, 1m30s)")
    return sum(int(n) * unit for n, unit in zip(match.groups(), _UNITS_MS.values(), strict=True) if n)


def format_duration_ms(ms: int) -> str:
    """A PromQL duration for ``ms`` milliseconds: whole seconds as ``<n>s``, else ``<n>ms``."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass
class PrometheusClient:
    base_url: str
    timeout: float = 30.0

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """The ``data`` of Prometheus's JSON answer (its shape is the query's: a JSON document)."""
        url = f"{self.base_url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read()).get("error", "")
            except (ValueError, AttributeError):
                detail = ""
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} refused the query ({exc.code}): {detail or exc.reason}",
                hint="check the monitoring role ran on the controller (docs/monitoring.md)",
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = str(getattr(exc, "reason", None) or exc)
            raise PrometheusUnreachable(
                f"Prometheus at {self.base_url} cannot be reached: {reason}",
                reason=reason,
                hint="is the cluster up, with software.monitoring on in its spec? 'gpufleet status SPEC'",
            ) from exc
        except ValueError as exc:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base_url} answered what is not JSON: {exc}"
            ) from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} answered {str(body)[:300]}")
        data = body.get("data")
        assert isinstance(data, dict)
        return data

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        data = self._get(
            "/api/v1/query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        return [
            Series(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
            for item in data.get("result", [])
        ]

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        out = []
        for item in data.get("result", []):
            t, v = item["value"]
            out.append(Series(dict(item["metric"]), [(float(t), float(v))]))
        return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tunnel_command(inventory: Inventory, local_port: int, remote_port: int = DEFAULT_PORT) -> list[str]:
    """``ssh -N -L`` to the controller's Prometheus, with the cluster's own key and SSH options."""
    connection = inventory.connection
    argv = ["ssh", "-N", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ExitOnForwardFailure=yes"]
    if connection.private_key_file:
        argv += ["-i", connection.private_key_file]
    if connection.ssh_common_args:
        argv += shlex.split(connection.ssh_common_args)
    argv += ["-L", f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"]
    argv += [f"{connection.user}@{inventory.controller.address}"]
    return argv


@contextmanager
def prometheus_url(inventory: Inventory, wait: float = 20.0) -> Iterator[str]:
    """The URL of the cluster's Prometheus for the duration of the block (an SSH tunnel to the controller),
    or ``GPUFLEET_PROMETHEUS_URL`` when set. ``PrometheusUnavailable`` when the tunnel does not come up."""
    configured = os.environ.get(URL_ENV)
    if configured:
        yield configured
        return
    port = _free_port()
    controller = inventory.controller
    try:
        process = subprocess.Popen(
            tunnel_command(inventory, port),
            stdin=subprocess.DEVNULL,  # never the caller's (gpufleet.configure.remote says why)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    except FileNotFoundError:
        raise PrometheusUnavailable(
            f"ssh is not installed on this machine: gpufleet reaches Prometheus on {controller.name} through "
            "an SSH tunnel",
            hint="apt-get install openssh-client",
        ) from None
    try:
        deadline = time.monotonic() + wait
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise PrometheusUnavailable(
                    f"cannot open an SSH tunnel to Prometheus on {inventory.controller.name}: "
                    f"{err.strip()[-300:]}",
                    hint="check that the cluster is up ('gpufleet status SPEC')",
                )
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise PrometheusUnavailable(
                    f"the SSH tunnel to {inventory.controller.name} did not open in {wait:.0f} s"
                )
            time.sleep(0.2)
        try:
            yield f"http://127.0.0.1:{port}"
        except PrometheusUnreachable as exc:
            # The tunnel is up, so the controller is; its Prometheus is not listening. The tunnel's local
            # port means nothing to the user: name the controller and the service.
            raise PrometheusUnavailable(
                f"Prometheus on the controller {controller.name} ({controller.address}, port {DEFAULT_PORT} "
                f"there) does not answer: {exc.reason}",
                hint=f"check its service there: ssh to {controller.name} and run 'systemctl status "
                f"{SERVICE}' ('journalctl -u {SERVICE}' says why it stopped); 'gpufleet configure SPEC' "
                "starts it again",
            ) from exc
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
