"""The utilization report ``down`` writes before it destroys anything: the cluster's whole life, from its
creation to now, out of the cluster's Prometheus (whose data goes with the controller).

It lands outside the state folder (which teardown removes last): ``$GPUFLEET_STATE_DIR/../`` is not ours,
so it goes to ``<state root>/reports/<cluster>-<UTC time>/``. When Prometheus cannot be read (monitoring
off, the controller already gone, no inventory), the report says why and teardown goes on.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.inventory.model import Inventory
from gpufleet.monitoring import utilization
from gpufleet.monitoring.prometheus import PrometheusClient, prometheus_url
from gpufleet.progress import Reporter
from gpufleet.state import ClusterState, state_root


def reports_dir(cluster: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return state_root() / "reports" / f"{cluster}-{stamp}"


def save_before_teardown(state: ClusterState, reporter: Reporter) -> dict[str, Any]:
    """Write the report; returns where it went and whether Prometheus answered (never raises a
    ``GpufleetError``: teardown must go on)."""
    out = reports_dir(state.name)
    try:
        if not state.inventory_file.exists():
            raise GpufleetError(f"cluster '{state.name}' has no inventory (its 'up' never finished)")
        inventory = Inventory.read(state.inventory_file)
        if not inventory.software.get("monitoring", False):
            raise GpufleetError("monitoring is off for this cluster (spec software.monitoring: false)")
        start = state.created_at.timestamp()
        with prometheus_url(inventory) as url:
            report = utilization.collect(PrometheusClient(url, timeout=20.0), inventory, start, time.time())
    except GpufleetError as exc:
        reason = exc.message
        utilization.write_report(out, None, unavailable=reason)
        reporter.info(f"utilization report: not available ({reason}); written to {out}")
        return {"dir": str(out), "available": False, "reason": reason}
    files = utilization.write_report(out, report)
    total = report.total
    reporter.info(
        f"utilization report written to {out}: {total.allocated_gpu_hours:.3f} GPU-hours allocated, "
        f"busy {utilization.fmt(total.busy_ratio, '.1%')}"
    )
    return {"dir": str(out), "available": True, "files": [str(f) for f in files], "total": total.to_json()}
