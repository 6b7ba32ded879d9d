"""Find the node(s) that make a cluster-wide run fail, in few rounds of parallel smaller runs.

The planner only needs ``run_round(groups) -> [ProbeResult per group]``: run a collective on each node
group (the groups of one round are disjoint, so Slurm runs them side by side) and say whether each
passed its gate. ``suite.py`` provides one on top of ``SlurmRunner``; the tests provide a simulated one.

The search, starting from a node set whose run failed:

- every failing group is split into halves and both halves are run (in the same round as every other
  group's halves). A failing half is searched further; a passing half's nodes are proven good.
- a single node is run together with a partner proven good in a multi-node run, so the run still
  crosses the network; only while no such partner exists (2 or 3 nodes in all, or both halves failed)
  does it run on its own.
- a node that fails together with a good partner is named bad, with the evidence; one that fails on its
  own is named only if some other node passed a run (otherwise every run failed: a software or
  configuration fault is more likely, and nobody is blamed).
- when more than ``max_failing_groups`` disjoint groups fail in one round, the failure is widespread and
  the search stops instead of running ever more jobs.
- a group that failed while each of its halves passed is reported as unresolved: the fault is not in
  one node (scale, a switch, flakiness) and no node is blamed for it.

With one bad node among N the search takes ceil(log2 N) rounds of at most 2 jobs each (halves shrink by
2 per round; the last round pairs the two survivors with good partners); a second bad node is searched
in parallel in the same rounds. Healthy nodes are not named: a node is named only by a run in which
every other node had already passed, or by failing on its own while other nodes passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import ceil, log2
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    passed: bool
    reason: str = ""
    busbw: float | None = None


RunRound = Callable[[list[list[str]]], list[ProbeResult]]


@dataclass
class Probe:
    nodes: list[str]  # what runs
    suspects: list[str]  # the nodes under test (the rest are proven-good partners)
    group: int  # index of the suspect group this probe splits
    result: ProbeResult | None = None

    def to_json(self) -> dict[str, Any]:
        partner = [node for node in self.nodes if node not in self.suspects]
        return {
            "nodes": _shorten(self.nodes),
            "count": len(self.nodes),
            "partner": partner[0] if partner else None,
            "passed": self.result.passed if self.result else None,
            "busbw": self.result.busbw if self.result else None,
            "reason": self.result.reason if self.result else None,
        }


def _shorten(nodes: Sequence[str]) -> str:
    return ",".join(nodes) if len(nodes) <= 4 else f"{nodes[0]},...,{nodes[-1]} ({len(nodes)} nodes)"


@dataclass
class BisectResult:
    nodes: int
    bad_nodes: dict[str, str] = field(default_factory=dict)  # node -> why
    unresolved: list[list[str]] = field(default_factory=list)
    rounds: list[list[Probe]] = field(default_factory=list)
    stopped_early: bool = False
    widespread: bool = False  # failures everywhere: software or configuration, not a few nodes
    collective: str | None = None
    drained: list[str] = field(default_factory=list)
    drain_error: str | None = None

    @property
    def round_count(self) -> int:
        return len(self.rounds)

    @property
    def job_count(self) -> int:
        return sum(len(probes) for probes in self.rounds)

    @property
    def passed(self) -> bool:
        """A bisection never makes a report pass: it only explains a failure."""
        return False

    def to_json(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "nodes": self.nodes,
            "bad_nodes": self.bad_nodes,
            "unresolved": [_shorten(group) for group in self.unresolved],
            "rounds": self.round_count,
            "jobs": self.job_count,
            "stopped_early": self.stopped_early,
            "widespread": self.widespread,
            "drained": self.drained,
            "drain_error": self.drain_error,
            "history": [[probe.to_json() for probe in probes] for probes in self.rounds],
        }

    def markdown(self) -> list[str]:
        lines = ["## Bad nodes (bisection)", ""]
        lines.append(
            f"{self.round_count} rounds, {self.job_count} jobs over {self.nodes} nodes"
            + (f" ({self.collective})" if self.collective else "")
        )
        lines.append("")
        if self.bad_nodes:
            lines.extend(f"- **{node}**: {why}" for node, why in self.bad_nodes.items())
        else:
            lines.append("- no single node was found to blame")
        for group in self.unresolved:
            lines.append(
                f"- unresolved: {_shorten(group)} fail together while each half passes (not one node: scale, "
                "a switch, or a flaky run)"
            )
        if self.widespread:
            lines.append(
                "- the failure is widespread (every run failed, or too many node groups at once): look for a "
                "software or configuration fault before blaming nodes"
            )
        elif self.stopped_early:
            lines.append("- the search stopped at its round limit before it finished")
        if self.drained:
            lines.append(f"- drained in Slurm: {', '.join(self.drained)}")
        if self.drain_error:
            lines.append(f"- drain failed: {self.drain_error}")
        for index, probes in enumerate(self.rounds, 1):
            shown = "; ".join(
                f"{probe.to_json()['nodes']}: {'pass' if probe.result and probe.result.passed else 'FAIL'}"
                for probe in probes
            )
            lines.append(f"- round {index}: {shown}")
        return lines


def round_limit(nodes: int) -> int:
    """Generous bound on rounds: the search needs about log2(N); this stops a confused search."""
    return 2 * max(1, ceil(log2(max(nodes, 2)))) + 4


def _halves(group: list[str]) -> list[list[str]]:
    middle = len(group) // 2
    return [group[:middle], group[middle:]]


def find_bad_nodes(
    failing: Sequence[str],
    run_round: RunRound,
    *,
    max_rounds: int | None = None,
    max_failing_groups: int = 4,
) -> BisectResult:
    """Search ``failing`` (a node set whose run failed) for the nodes that make it fail.

    ``max_failing_groups``: when more disjoint groups than this fail in one round, the failure is
    widespread (a software or configuration fault, or many bad nodes) and the search stops rather than
    run ever more jobs; the groups are reported unresolved.
    """
    result = BisectResult(nodes=len(failing))
    suspects: list[list[str]] = [list(failing)] if len(failing) > 0 else []
    good_net: list[str] = []  # passed a run with at least one other node: usable as a partner
    good_any: set[str] = set()  # passed some run, maybe on its own
    failed_alone: dict[str, str] = {}  # failed a single-node run: named only if some other node passed
    limit = max_rounds or round_limit(len(failing))
    while suspects:
        if result.round_count >= limit:
            result.stopped_early = True
            result.unresolved.extend(suspects)
            break
        partners = list(reversed(good_net))
        probes: list[Probe] = []
        deferred: list[list[str]] = []
        for index, group in enumerate(suspects):
            parts = [group] if len(group) == 1 else _halves(group)
            for part in parts:
                if len(part) >= 2:
                    probes.append(Probe(list(part), list(part), index))
                elif partners:
                    probes.append(Probe([part[0], partners.pop()], list(part), index))
                elif not good_net:
                    probes.append(Probe(list(part), list(part), index))  # no partner proven yet: alone
                else:
                    deferred.append(part)  # every good partner is busy this round
        outcomes = run_round([probe.nodes for probe in probes])
        if len(outcomes) != len(probes):
            raise ValueError(f"run_round returned {len(outcomes)} results for {len(probes)} groups")
        for probe, outcome in zip(probes, outcomes, strict=True):
            probe.result = outcome
        result.rounds.append(probes)
        failing_probes = [probe for probe in probes if probe.result and not probe.result.passed]
        if len(failing_probes) > max_failing_groups:
            result.stopped_early = True
            result.widespread = True
            result.unresolved.extend(probe.suspects for probe in failing_probes)
            break
        next_suspects: list[list[str]] = []
        failed_groups: set[int] = set()
        for probe in probes:
            assert probe.result is not None
            if probe.result.passed:
                good_any.update(probe.nodes)
                if len(probe.nodes) >= 2:
                    good_net.extend(node for node in probe.suspects if node not in good_net)
                continue
            failed_groups.add(probe.group)
            if len(probe.suspects) > 1:
                next_suspects.append(probe.suspects)
            elif len(probe.nodes) > 1:
                partner = next(node for node in probe.nodes if node not in probe.suspects)
                result.bad_nodes[probe.suspects[0]] = (
                    f"failed together with proven-good {partner}: {probe.result.reason}"
                )
            else:
                failed_alone[probe.suspects[0]] = f"failed on its own: {probe.result.reason}"
        deferred_groups = {
            index for index, group in enumerate(suspects) for part in deferred if part[0] in group
        }
        for index, group in enumerate(suspects):
            if index not in failed_groups and index not in deferred_groups and len(group) > 1:
                result.unresolved.append(group)
        suspects = next_suspects + deferred
    if good_any:
        result.bad_nodes.update(failed_alone)
    elif failed_alone:
        # Every run failed, even single-node ones: nothing to contrast with, so nobody is blamed.
        result.widespread = True
        result.unresolved.append(sorted(failed_alone))
    return result
