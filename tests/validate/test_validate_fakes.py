"""FakeSlurm's slow node is a slow link: a ring is bounded by its slowest member's link, so large messages
are capped at SLOW_LINK of the peak while small, latency-bound ones are not slowed; two slow members bound
it no lower than one."""

from __future__ import annotations

import pytest
from validate_fakes import _TABLES, SLOW_LINK, FakeSlurm

from gpufleet.validate.nccl_log import parse_text

NODES = ["n1", "n2", "n3", "n4"]


def busbw(fake: FakeSlurm, nodes: list[str]) -> dict[int, float]:
    table = _TABLES["all_reduce"]
    low, high = table[0][0], table[-1][0]
    task = ["/opt/nccl-tests/all_reduce_perf", "-b", str(low), "-e", str(high), "-f", "2"]
    task += ["-w", "1", "-n", "1", "-c", "1"]
    rc, out, _ = fake._collective(nodes, 8, task, {})
    assert rc == 0, out
    (test,) = parse_text(out)
    return {row.size: row.oop.busbw for row in test.rows if row.oop is not None}


def test_a_slow_link_caps_the_ring_at_large_messages_only():
    fake = FakeSlurm(NODES, bad={"n3": "slow"})
    healthy, slowed = busbw(fake, ["n1", "n2"]), busbw(fake, ["n3", "n4"])
    peak = max(b for _, b in _TABLES["all_reduce"])
    largest, smallest = max(healthy), min(healthy)
    assert slowed[largest] == pytest.approx(SLOW_LINK * peak, rel=0.01), (slowed[largest], peak)
    assert slowed[smallest] == pytest.approx(healthy[smallest], rel=0.01), (
        "latency-bound sizes are not capped"
    )
    assert busbw(fake, NODES)[largest] == pytest.approx(slowed[largest], rel=0.01), (
        "the whole ring is bounded"
    )


def test_two_slow_members_bound_the_ring_no_lower_than_one():
    one = busbw(FakeSlurm(NODES, bad={"n3": "slow"}), NODES)
    two = busbw(FakeSlurm(NODES, bad={"n3": "slow", "n4": "slow"}), NODES)
    assert two == pytest.approx(one, rel=0.01)
