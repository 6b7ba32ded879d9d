"""The ledger of this site's own validation runs, and the site baseline derived from it.

Every validation appends one JSON line per collective it judged to ``$GPUFLEET_STATE_DIR/ledger.jsonl``
(beside the per-cluster folders, so ``down`` keeps it; ``GPUFLEET_LEDGER`` or ``--ledger`` moves it):
the instance type, node count, collective, message size and placement the figure was read at, the busbw,
the versions (NCCL, nccl-tests, net plugin), the transport NCCL used, the expected figure, the bound and
the verdict. A type no vendor publishes a figure for thus accumulates its own, with their provenance.

The site baseline for (type, nodes, collective, NCCL version, plugin) is the median busbw of the passing
runs that match; ``validation.baseline: ledger`` gates on it (``GateConfig.site_baselines``).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import StateError
from gpufleet.validate.gate import SiteBaseline, Verdict
from gpufleet.validate.models import TestResult

LEDGER_NAME = "ledger.jsonl"


def ledger_path(override: Path | None = None) -> Path:
    """Where the ledger lives: ``override``, else ``$GPUFLEET_LEDGER``, else the state folder's root."""
    if override is not None:
        return override
    configured = os.environ.get("GPUFLEET_LEDGER")
    if configured:
        return Path(configured).expanduser()
    from gpufleet.state import state_root

    return state_root() / LEDGER_NAME


@dataclass(frozen=True)
class Entry:
    """One judged collective of one validation, as the ledger keeps it."""

    time: str
    cluster: str
    instance_type: str | None
    nodes: int | None
    collective: str | None
    message_bytes: int | None
    placement: str | None
    busbw: float | None
    tier: str
    mode: str
    expected: float | None
    bound: float | None
    transport: str | None  # what NCCL used, as the log says
    transport_expected: str | None  # what the fabric, or the nodes' NCCL env file, configured
    nccl: str | None
    nccl_tests: str | None
    plugin: str | None
    hosts: tuple[str, ...]

    @classmethod
    def of(cls, cluster: str, test: TestResult, verdict: Verdict, when: datetime | None = None) -> Entry:
        return cls(
            time=(when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            cluster=cluster,
            instance_type=verdict.instance_type,
            nodes=verdict.nodes,
            collective=verdict.collective,
            message_bytes=verdict.measured_bytes,
            placement=verdict.measured_half,
            busbw=verdict.measured_busbw,
            tier=verdict.tier.value,
            mode=verdict.mode.value,
            expected=verdict.expected,
            bound=round(verdict.bound.gbps, 2) if verdict.bound else None,
            transport=test.transport,
            transport_expected=verdict.transport_expected,
            nccl=test.nccl_version,
            nccl_tests=test.tests_version,
            plugin=test.net_plugin,
            hosts=tuple(sorted(test.hosts)),
        )

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "hosts": list(self.hosts)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        fields = set(cls.__dataclass_fields__)
        values = {key: value for key, value in data.items() if key in fields}
        values["hosts"] = tuple(values.get("hosts") or ())
        for name in fields - set(values):
            values[name] = None
        return cls(**values)

    @property
    def key(self) -> tuple[str | None, int | None, str | None, str | None, str | None]:
        """What makes two runs comparable: the type, node count, collective and the versions."""
        return (self.instance_type, self.nodes, self.collective, self.nccl, self.plugin)


def append(path: Path, entries: Iterable[Entry]) -> None:
    """Append ``entries``, one JSON line each; the folder is made if missing."""
    lines = [json.dumps(entry.to_json(), sort_keys=True) for entry in entries]
    if not lines:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    except OSError as error:
        raise StateError(
            f"cannot append to the validation ledger {path}: {error.strerror}",
            hint="point --ledger (or GPUFLEET_LEDGER) at a writable file",
        ) from error


def read(path: Path) -> list[Entry]:
    """Every entry of the ledger at ``path`` (none when it does not exist); a broken line is named."""
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise StateError(
                f"{path} line {number} is not JSON ({error.msg}): the ledger was edited or cut short",
                hint="remove or fix that line; every other line is one run",
            ) from error
        entries.append(Entry.from_json(data))
    return entries


@dataclass(frozen=True)
class Derived:
    """A site baseline: the median of the passing runs with the same key."""

    key: tuple[str | None, int | None, str | None, str | None, str | None]
    busbw: float
    message_bytes: int
    runs: int

    @property
    def title(self) -> str:
        instance_type, nodes, _, nccl, plugin = self.key
        versions = ", ".join(v for v in (f"NCCL {nccl}" if nccl else None, plugin) if v) or "versions unknown"
        return f"median of {self.runs} passing run(s) on {nodes} x {instance_type} here, {versions}"


def site_baselines(entries: Sequence[Entry]) -> list[Derived]:
    """One site baseline per (type, nodes, collective, versions) with at least one passing run."""
    groups: dict[tuple[str | None, int | None, str | None, str | None, str | None], list[Entry]] = {}
    for entry in entries:
        if entry.tier == "pass" and entry.busbw is not None and entry.message_bytes is not None:
            groups.setdefault(entry.key, []).append(entry)
    derived = []
    for key, runs in groups.items():
        size = max(run.message_bytes or 0 for run in runs)
        at_size = [run.busbw for run in runs if run.message_bytes == size and run.busbw is not None]
        derived.append(Derived(key, round(statistics.median(at_size), 4), size, len(at_size)))
    return sorted(derived, key=lambda d: tuple(str(part) for part in d.key))


def gate_baselines(
    entries: Sequence[Entry],
    instance_type: str,
    nodes: int,
    nccl: str | None = None,
    plugin: str | None = None,
) -> dict[str, SiteBaseline]:
    """The site baselines the gate uses for a run of ``nodes`` x ``instance_type``, per collective. The
    versions must match when given (a run whose versions are not known yet matches any)."""
    found: dict[str, SiteBaseline] = {}
    for derived in site_baselines(entries):
        kind, count, collective, run_nccl, run_plugin = derived.key
        if kind != instance_type or count != nodes or collective is None:
            continue
        if (nccl is not None and run_nccl != nccl) or (plugin is not None and run_plugin != plugin):
            continue
        best = found.get(collective)
        if best is None or derived.runs > best.runs:
            found[collective] = SiteBaseline(
                derived.busbw, derived.message_bytes, derived.runs, derived.title
            )
    return found
