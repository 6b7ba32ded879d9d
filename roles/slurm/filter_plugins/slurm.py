"""Filters for the slurm role: which node builds each Slurm build the control host's cache lacks, the one
value the compute nodes agree on, which compute nodes have registered with slurmctld, and a slurm.conf
list parameter with the values the role needs kept in it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


def slurm_builders(keys: Mapping[str, str], cached: Iterable[str]) -> dict[str, str]:
    """{build key: node} for each key among the nodes' that is not cached: the first node, by name, with it.

    ``keys`` maps each node of the play to its build key (Slurm release, userland, recipe); one node per
    missing key builds, the others wait for it and install the same package.
    """
    have = set(cached)
    builders: dict[str, str] = {}
    for node in sorted(keys):
        key = keys[node]
        if key not in have and key not in builders:
            builders[key] = node
    return builders


def slurm_one_or(values: Iterable[object], fallback: object) -> object:
    """The one value of ``values`` when they all agree (and there is one), else ``fallback``."""
    distinct = {str(value) for value in values}
    return distinct.pop() if len(distinct) == 1 else fallback


# sinfo's state names (%T, lowercase) of a node slurmctld has not heard from or cannot use: down (never
# registered since it was made, or stopped answering), unknown, future and cloud placeholders, an invalid
# registration ("inval": its slurmd reported less than its node line), and any state marked not responding
# ("*"). Slurm 24.11.5, src/common/slurm_protocol_defs.c, node_state_string.
_NOT_REGISTERED = ("down", "unknown", "future", "cloud", "inval")


def slurm_registrations(sinfo: str, expected: Iterable[str]) -> dict[str, str]:
    """{node: what slurmctld said of it} for each ``expected`` node that has not registered, from
    ``sinfo -N -h -o '%N|%T|%E'`` (name, state, reason): not listed at all, or in a state that is not a
    registered node's (``_NOT_REGISTERED``, or ``*``: not responding). Empty: every node registered."""
    seen: dict[str, tuple[str, str]] = {}
    for line in sinfo.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) >= 2 and parts[0]:
            seen[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    missing: dict[str, str] = {}
    for node in sorted(set(expected)):
        if node not in seen:
            missing[node] = "slurmctld does not know it (its slurmd never registered)"
            continue
        state, reason = seen[node]
        base = state.rstrip("*~#!%$@^-+").lower()
        if state.endswith("*") or base in _NOT_REGISTERED:
            why = f" ({reason})" if reason and reason != "none" else ""
            missing[node] = f"slurmctld lists it {state}{why}"
    return missing


def slurm_with_values(config: Mapping[str, object], key: str, needed: Iterable[str]) -> dict[str, object]:
    """``config`` with each of ``needed`` in its comma-separated parameter ``key`` (slurm.conf's
    SlurmctldParameters, SlurmdParameters: lists of flags and key=value items): an override of the parameter
    adds to what the role needs there rather than replacing it. The role's values first, then the others in
    their order, each once (a ``name=value`` item counts by its name: the override's value wins)."""
    given = [item.strip() for item in str(config.get(key) or "").split(",") if item.strip()]
    names = {item.split("=", 1)[0] for item in given}
    merged = [item for item in needed if item.split("=", 1)[0] not in names] + given
    return {**config, key: ",".join(merged)} if merged else dict(config)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., object]]:
        return {
            "slurm_builders": slurm_builders,
            "slurm_one_or": slurm_one_or,
            "slurm_registrations": slurm_registrations,
            "slurm_with_values": slurm_with_values,
        }
