"""The spec is the truth: a command given a spec that differs from the cluster's shows it or refuses it.

``up`` records the spec's content in the cluster's state (``ClusterState.begin``). Given another one,
``check_up`` splits the differences (``gpufleet.spec.drift``) into what the backend changes in place (shown,
then applied) and what needs the cluster made again (refused, named field by field, unless ``--replace``);
a spec from another file with the same name is refused too, unless ``--replace``: a name is not an
identity, and on a cloud the same name from another spec is someone else's cluster. ``configure`` and
``validate`` act on what ``up`` made (its inventory), so ``require_same`` stops them on any difference but
the run's own settings (``RUN_ONLY``), with the command that applies it.

A cluster made before the state recorded specs has no record to compare with: nothing is refused, and its
next ``up`` records one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.errors import SpecDrift, StateError
from gpufleet.providers import BACKENDS
from gpufleet.spec import drift
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState


@dataclass
class Drift:
    """How ``spec`` differs from the one the cluster was made from."""

    cluster: str
    recorded: dict[str, Any]
    recorded_path: str | None
    in_place: list[drift.Change] = field(default_factory=list)
    remade: list[drift.Change] = field(default_factory=list)
    other_file: str | None = None  # this spec's file, when it is not the one the cluster was made from

    @property
    def changes(self) -> list[drift.Change]:
        return [*self.in_place, *self.remade]

    def recorded_spec(self) -> ClusterSpec:
        """The spec the cluster was made from (what ``--replace`` tears down)."""
        try:
            return ClusterSpec.model_validate(self.recorded)
        except ValueError as exc:
            raise StateError(
                f"the spec recorded for cluster '{self.cluster}' no longer validates ({exc}), so it cannot "
                "be taken down to be made again",
                hint="run 'gpufleet down' with the spec it was made from "
                f"({self.recorded_path or 'unknown'}) first",
            ) from None


def drift_of(spec: ClusterSpec, state: ClusterState, spec_path: Path | None) -> Drift | None:
    """The differences between ``spec`` and the cluster's recorded spec; None when there is no record."""
    if not state.exists():
        return None
    record = state.load()
    recorded = record.get("spec")
    if not isinstance(recorded, dict):
        return None
    recorded_path = record.get("spec_path")
    found = drift.changes(recorded, drift.recordable(spec))
    entry = BACKENDS.get(str(recorded.get("provider", {}).get("kind")))
    in_place, remade = drift.split(found, entry.in_place if entry is not None else ())
    if entry is None or recorded.get("provider", {}).get("kind") != spec.provider.kind:
        in_place, remade = [], found
    result = Drift(spec.name, recorded, recorded_path, in_place, remade)
    if spec_path is not None and recorded_path and str(spec_path.resolve()) != recorded_path and found:
        result.other_file = str(spec_path.resolve())
    return result


def check_up(
    spec: ClusterSpec, state: ClusterState, spec_path: Path | None, *, replace: bool
) -> Drift | None:
    """``SpecDrift`` when ``up`` of ``spec`` would change what cannot change in place, or comes from
    another file, and ``replace`` is not given; else the differences (None: nothing recorded)."""
    found = drift_of(spec, state, spec_path)
    if found is None or replace or not (found.remade or found.other_file):
        return found
    where = f"made from {found.recorded_path}" if found.recorded_path else "made from a spec"
    if found.other_file:
        message = (
            f"cluster '{spec.name}' exists, {where}, not from {found.other_file}; the two differ:\n"
            + drift.listed(found.changes)
        )
        hint = (
            "a cluster of its own needs a name of its own: change 'name' in this spec; if this file is now "
            f"the cluster's spec, run 'gpufleet up --replace {spec_path}'"
        )
    else:
        message = (
            f"cluster '{spec.name}' ({where}) cannot take these changes in place; its machines would have to "
            "be made again:\n" + drift.listed(found.remade)
        )
        if found.in_place:
            message += "\nand these would change in place:\n" + drift.listed(found.in_place)
        hint = "undo those changes to keep the cluster as it is, or run 'gpufleet up --replace SPEC'"
    hint += (
        " (it takes the cluster down as 'gpufleet down' does, its shared filesystem with it, then makes it "
        "from this spec)"
        if found.remade
        else " (applies the in-place changes; nothing is made again)"
    )
    raise SpecDrift(message, hint=hint)


def require_same(spec: ClusterSpec, state: ClusterState, command: str) -> None:
    """``SpecDrift`` when ``spec`` differs from the cluster's recorded spec outside ``RUN_ONLY``:
    ``configure`` and ``validate`` act on what ``up`` made, so they would silently act on other facts."""
    found = drift_of(spec, state, None)
    if found is None:
        return
    relevant = [c for c in found.changes if not drift.under(c.path, drift.RUN_ONLY)]
    if not relevant:
        return
    remade = [c for c in relevant if c in found.remade]
    where = f" (from {found.recorded_path})" if found.recorded_path else ""
    message = (
        f"the spec differs from the one cluster '{spec.name}' was brought up with{where}; {command} acts on "
        "what up made, so it would not see these:\n" + drift.listed(relevant)
    )
    if remade:
        hint = (
            "apply them with 'gpufleet up --replace SPEC' (these need the machines made again: "
            + ", ".join(c.path for c in remade)
            + f"), then run '{command}' again; or undo them in the spec"
        )
    else:
        hint = f"apply them with 'gpufleet up SPEC' (they change in place), then run '{command}' again"
    raise SpecDrift(message, hint=hint)
