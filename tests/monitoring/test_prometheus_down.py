"""Prometheus stopped on the controller (issue 38, point 5): util named a throwaway local tunnel port. Now the
message names the controller, Prometheus's port there and the service to check.

The SSH tunnel is stood in for by a process that does what ``ssh -L`` does when nothing listens at the far
end: it accepts each local connection and closes it at once (ssh: "channel 2: open failed: connect failed:
Connection refused"), so the client reads a connection closed without an answer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.monitoring.test_utilization import inventory

from gpufleet.monitoring import prometheus
from gpufleet.monitoring.prometheus import PrometheusClient, PrometheusUnavailable, prometheus_url

FORWARD_TO_NOTHING = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
while True:
    connection, _ = server.accept()
    connection.close()
"""


def test_prometheus_down_names_the_controller_and_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prometheus.URL_ENV, raising=False)
    monkeypatch.setattr(
        prometheus,
        "tunnel_command",
        lambda inventory, port: [sys.executable, "-c", FORWARD_TO_NOTHING, str(port)],
    )
    with pytest.raises(PrometheusUnavailable) as down, prometheus_url(inventory()) as url:
        PrometheusClient(url, timeout=5).query("up")
    message, hint = down.value.message, down.value.hint or ""
    assert message.startswith(
        "Prometheus on the controller ctl (10.0.0.3, port 9090 there) does not answer: "
    )
    assert "127.0.0.1" not in message
    assert "systemctl status prometheus" in hint and "journalctl -u prometheus" in hint and "ctl" in hint


def test_no_ssh_is_a_missing_prerequisite(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(prometheus.URL_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with (
        pytest.raises(PrometheusUnavailable, match="ssh is not installed on this machine"),
        prometheus_url(inventory()),
    ):
        pass
