"""Offline preflight checks from the spec and the catalog (``gpufleet check``)."""

from gpufleet.preflight.base import (
    Finding,
    check,
    errors,
    registered_checks,
    require_no_errors,
    run_checks,
)
from gpufleet.severity import Severity

__all__ = [
    "Finding",
    "Severity",
    "check",
    "errors",
    "registered_checks",
    "require_no_errors",
    "run_checks",
]
