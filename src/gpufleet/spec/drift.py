"""What differs between the spec a cluster was made from and the spec given now (issue 38, point 1).

``gpufleet up`` records the spec's content in the cluster's state (``recordable``: the validated model,
defaults filled in, as JSON) beside the file it came from. A later command compares the spec it is given
with that record (``changes``): each field whose value differs is one ``Change``, named by its dotted path
(node groups by their name: ``node_groups[compute].count``), with the value recorded and the value now.

Which changes need new machines is a property of the field and of the backend: ``IN_PLACE`` holds the
fields every backend applies to a running cluster (the run's own settings, the record's expiry, what
``configure`` installs, tags); a backend adds its own in its row of ``gpufleet.providers.BACKENDS``.
``RUN_ONLY`` are the fields no command but the one that reads them needs to agree on (``validation``: each
``validate`` reads its own), so ``configure`` and ``validate`` may be given another validation block.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.spec.model import ClusterSpec

# Changed on a running cluster by every backend: validation is read by each run; lifetime by the state
# record (and the clouds' expiry tag, which Pulumi updates in place); software by `configure` (a new
# version, image or stack is installed there; a baked image of other pins only skips less); tags are
# updated in place on the resources that carry them; the checkpoint plan is read by `check` and `plan`.
IN_PLACE: tuple[str, ...] = ("validation", "lifetime", "software", "tags", "checkpoint")
# Read by one run only: `configure` and `validate` of a spec that differs from the record only here go on.
RUN_ONLY: tuple[str, ...] = ("validation",)


def recordable(spec: ClusterSpec) -> dict[str, Any]:
    """The spec's content as the state records it: every field, defaults filled in, JSON types."""
    return spec.model_dump(mode="json")


def fingerprint(content: Mapping[str, Any]) -> str:
    """sha256 of the content's canonical JSON: equal for equal specs, whatever their layout or comments."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def shown(value: Any) -> str:
    """A recorded value as a message shows it (``(none)`` for null or a field that is not there)."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class Change:
    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.path}: {shown(self.old)} -> {shown(self.new)}"


def _keyed(items: Sequence[Any]) -> dict[str, Any] | None:
    """A list of blocks with unique names (node groups) as {name: block}; None for any other list."""
    if not items or not all(isinstance(i, Mapping) and isinstance(i.get("name"), str) for i in items):
        return None
    named = {str(item["name"]): item for item in items}
    return named if len(named) == len(items) else None


def _walk(path: str, old: Any, new: Any, found: list[Change]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in list(old) + [k for k in new if k not in old]:
            _walk(f"{path}.{key}" if path else str(key), old.get(key), new.get(key), found)
        return
    if isinstance(old, list) and isinstance(new, list):
        before, after = _keyed(old), _keyed(new)
        if before is not None and after is not None:
            for name in list(before) + [n for n in after if n not in before]:
                _walk(f"{path}[{name}]", before.get(name), after.get(name), found)
            return
    if old != new:
        found.append(Change(path, old, new))


def changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[Change]:
    """Every field whose value differs between two recorded specs, in the spec's order."""
    found: list[Change] = []
    _walk("", recorded, now, found)
    return found


def under(path: str, prefixes: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or inside one (``software.cuda`` is under ``software``)."""
    return any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in prefixes)


def split(found: Iterable[Change], in_place: Iterable[str]) -> tuple[list[Change], list[Change]]:
    """(changes applied in place, changes that need the cluster made again) for a backend that changes
    ``in_place`` (its own fields) besides ``IN_PLACE`` on a running cluster."""
    prefixes = (*IN_PLACE, *in_place)
    kept: list[Change] = []
    remade: list[Change] = []
    for change in found:
        (kept if under(change.path, prefixes) else remade).append(change)
    return kept, remade


def listed(found: Iterable[Change]) -> str:
    """Changes as one line each, for a message."""
    return "\n".join(f"  {change}" for change in found)
