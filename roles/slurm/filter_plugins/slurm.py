"""Filters for the slurm role: which node builds each Slurm build the control host's cache lacks."""

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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., object]]:
        return {"slurm_builders": slurm_builders}
