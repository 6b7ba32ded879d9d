"""Finding bad nodes: always the bad ones, never a healthy one, in about log2(N) rounds.

Two levels: the planner against an exact model (a run fails when it holds a bad node), for every N from
2 to 130 and larger ones up to 1,024; then the whole path gpufleet takes on a cluster, through the
Slurm runner against the fake login node, whose logs are parsed and gated like real ones.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from validate_fakes import FakeSlurm

from gpufleet.catalog import load_catalog
from gpufleet.spec.model import FabricKind
from gpufleet.validate.bisect import ProbeResult, find_bad_nodes, round_limit
from gpufleet.validate.gate import GateConfig
from gpufleet.validate.slurm import SlurmRunner, Sweep, TaskEnvironment
from gpufleet.validate.suite import Prober

SIZES = [*range(2, 131), 255, 256, 257, 500, 511, 512, 513, 1000, 1023, 1024]


def _nodes(count: int) -> list[str]:
    return [f"gpu-{index:04d}" for index in range(count)]


class Model:
    """A run fails iff it includes a bad node; also checks that each round's groups are disjoint."""

    def __init__(self, bad: set[str], *, alone_ok: bool = False, together: set[str] | None = None) -> None:
        self.bad = bad
        self.alone_ok = alone_ok  # the fault shows only when traffic crosses the network
        self.together = together  # the fault shows only when all of these run together
        self.rounds: list[list[list[str]]] = []

    def __call__(self, groups: list[list[str]]) -> list[ProbeResult]:
        seen: set[str] = set()
        for group in groups:
            assert not seen & set(group), "groups of one round must be disjoint"
            seen |= set(group)
        self.rounds.append(groups)
        return [ProbeResult(not self._fails(group), "model") for group in groups]

    def _fails(self, group: list[str]) -> bool:
        if self.together is not None:
            return self.together <= set(group)
        if self.alone_ok and len(group) == 1:
            return False
        return bool(self.bad & set(group))


@pytest.mark.parametrize("count", SIZES)
def test_one_bad_node_is_found_in_about_log2_rounds(count):
    nodes = _nodes(count)
    positions = {0, count - 1, count // 2, random.Random(count).randrange(count)}
    for position in positions:
        model = Model({nodes[position]})
        result = find_bad_nodes(nodes, model)
        assert list(result.bad_nodes) == [nodes[position]], (count, position, result.to_json())
        assert result.unresolved == [] and not result.stopped_early
        assert result.round_count <= math.ceil(math.log2(count)) + 1, (count, position, result.round_count)
        assert all(len(groups) <= 2 for groups in model.rounds)  # one suspect group: at most 2 jobs a round


@pytest.mark.parametrize("count", [size for size in SIZES if size >= 3])
def test_two_bad_nodes_are_both_found_and_nobody_else(count):
    nodes = _nodes(count)
    rng = random.Random(1000 + count)
    for _ in range(4):
        bad = set(rng.sample(nodes, 2))
        result = find_bad_nodes(nodes, Model(bad))
        assert set(result.bad_nodes) == bad, (count, bad, result.to_json())
        assert result.round_count <= math.ceil(math.log2(count)) + 2


def test_evidence_names_the_good_partner():
    nodes = _nodes(8)
    result = find_bad_nodes(nodes, Model({"gpu-0005"}))
    why = result.bad_nodes["gpu-0005"]
    assert why.startswith("failed together with proven-good gpu-00") and why.endswith(": model")
    assert result.rounds[-1][0].nodes[0] == "gpu-0004" or "gpu-0005" in [
        p.nodes[0] for p in result.rounds[-1]
    ]


def test_two_nodes_are_split_into_single_node_runs():
    result = find_bad_nodes(["a", "b"], Model({"b"}))
    assert result.bad_nodes == {"b": "failed on its own: model"} and result.round_count == 1


def test_a_fault_between_two_nodes_is_not_blamed_on_either():
    result = find_bad_nodes(["a", "b"], Model({"b"}, alone_ok=True))
    assert result.bad_nodes == {} and result.unresolved == [["a", "b"]]


def test_a_fault_of_the_whole_set_is_unresolved_not_blamed():
    nodes = _nodes(64)
    result = find_bad_nodes(nodes, Model(set(), together=set(nodes)))  # only the full 64-node run fails
    assert result.bad_nodes == {} and result.unresolved == [nodes] and result.round_count == 1


@pytest.mark.parametrize("count", [2, 3, 8, 1024])
def test_a_fault_everywhere_blames_nobody(count):
    nodes = _nodes(count)
    model = Model(set(nodes))  # every run fails, single-node runs too (say, a missing binary)
    result = find_bad_nodes(nodes, model)
    assert result.bad_nodes == {} and result.widespread
    assert result.job_count <= 2 + 4 + 8  # stops once more than 4 disjoint groups fail in a round


@pytest.mark.parametrize("count", [2, 5, 64])
def test_a_network_wide_fault_blames_nobody(count):
    nodes = _nodes(count)
    result = find_bad_nodes(nodes, Model(set(nodes), alone_ok=True))  # multi-node runs all fail
    assert result.bad_nodes == {}
    assert result.unresolved


def test_round_limit_stops_a_confused_search():
    nodes = _nodes(16)
    result = find_bad_nodes(nodes, Model({"gpu-0003"}), max_rounds=2)
    assert result.stopped_early and result.bad_nodes == {} and result.round_count == 2
    assert round_limit(1024) == 24


def test_run_round_must_answer_every_group():
    with pytest.raises(ValueError, match="returned 1 results for 2 groups"):
        find_bad_nodes(["a", "b", "c", "d"], lambda groups: [ProbeResult(True)])


# ---- through the Slurm runner, parsing and gating real-format logs ----------------------------------


def _prober(slurm: FakeSlurm, tmp_path: Path, *, floor: float = 20.0) -> Prober:
    runner = SlurmRunner(
        slurm,
        fabric=FabricKind.INFINIBAND,
        gpus_per_node=slurm.gpus,
        environment=TaskEnvironment(),
        sweep=Sweep(min_bytes=1 << 20, max_bytes=1 << 30, iterations=5, warmup_iterations=1),
    )
    config = GateConfig(
        min_busbw={"all_reduce": floor},
        fabric=FabricKind.INFINIBAND,
        require_transport=True,
        require_complete=True,
    )
    return Prober(runner, "all_reduce", config, load_catalog(), (1 << 30, 1 << 30), tmp_path)


@pytest.mark.parametrize(
    ("count", "bad"),
    [
        (2, {"gpu-0001": "slow"}),
        (5, {"gpu-0004": "wrong"}),
        (13, {"gpu-0007": "slow"}),
        (64, {"gpu-0000": "wrong", "gpu-0063": "slow"}),
        (97, {"gpu-0050": "socket"}),
        (1024, {"gpu-0777": "slow"}),
        (1023, {"gpu-0100": "wrong", "gpu-0101": "slow"}),
    ],
)
def test_simulated_cluster_through_the_runner(tmp_path, count, bad):
    nodes = _nodes(count)
    slurm = FakeSlurm(nodes, gpus=1, bad=bad)
    result = find_bad_nodes(nodes, _prober(slurm, tmp_path))
    assert set(result.bad_nodes) == set(bad), result.to_json()
    kinds = {"slow": "below the floor 20", "wrong": "#wrong > 0", "socket": "WRONG TRANSPORT"}
    for node, kind in bad.items():
        assert kinds[kind] in result.bad_nodes[node]
    assert result.round_count <= math.ceil(math.log2(count)) + 2
    # every round ran at the size the gate reads, on disjoint nodes, and its logs were kept
    assert all(" -b 1073741824 -e 1073741824 " in command for command in slurm.commands)
    assert len(list((tmp_path / "logs" / "bisect").glob("*.log"))) == result.job_count
