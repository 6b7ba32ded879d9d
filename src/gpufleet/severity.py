"""How serious a finding is: the one severity type of preflight findings and validation checks.

Two stages judge and each keeps the words its users already read, so the type carries both spellings on
one scale:

- preflight findings (``gpufleet check``) are ``error``, ``warning`` or ``info``;
- validation checks (the gate, the node health checks, the report) are ``fail``, ``warn``, ``info`` or
  ``pass``, as ``gpufleet validate`` and ``gpufleet report`` print them and as ``node_health.py`` (standalone
  on the nodes) writes them.

``rank`` puts both on one scale (a failed check weighs as an error), so findings of either stage sort and
filter alike. Depends on nothing else in gpufleet.
"""

from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    FAIL = "fail"
    WARN = "warn"
    PASS = "pass"

    @property
    def rank(self) -> int:
        """2 for what must be fixed, 1 for what should be looked at, 0 for information, -1 for a pass."""
        return _RANK[self]

    @property
    def is_failure(self) -> bool:
        return self.rank == 2


_RANK = {
    Severity.ERROR: 2,
    Severity.FAIL: 2,
    Severity.WARNING: 1,
    Severity.WARN: 1,
    Severity.INFO: 0,
    Severity.PASS: -1,
}
# The levels of a preflight finding, most serious first (``gpufleet check --level`` takes these).
FINDING_LEVELS = (Severity.ERROR, Severity.WARNING, Severity.INFO)
# The statuses of a validation check.
CHECK_STATUSES = (Severity.PASS, Severity.FAIL, Severity.WARN, Severity.INFO)
