"""Rounds and jobs the bad-node search needs, against the cluster size N (2 .. 1,024).

Runs ``gpufleet.validate.bisect.find_bad_nodes`` against an exact model of a cluster (a run fails when
it includes a bad node) for one and for two bad nodes at random places, many trials per N, and prints
per N: ceil(log2 N), the mean and largest number of rounds, the most jobs in one round, and the jobs in
all. A round is one batch of srun jobs on disjoint node sets, run side by side: its wall time is one
short nccl-tests run at the judged message size, whatever N is.

    python benchmarks/validate_bisect.py [--trials 200]

Results are recorded in docs/benchmarks.md under "Validation".
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from gpufleet.validate.bisect import ProbeResult, find_bad_nodes

SIZES = [2, 3, 4, 5, 7, 8, 13, 16, 31, 32, 33, 64, 100, 127, 128, 256, 257, 500, 512, 1000, 1023, 1024]


def trial(count: int, bad_count: int, rng: random.Random) -> tuple[int, int, int, bool]:
    nodes = [f"n{index:04d}" for index in range(count)]
    bad = set(rng.sample(nodes, bad_count))

    def run_round(groups: list[list[str]]) -> list[ProbeResult]:
        return [ProbeResult(not bad & set(group)) for group in groups]

    result = find_bad_nodes(nodes, run_round)
    widest = max(len(probes) for probes in result.rounds)
    return result.round_count, result.job_count, widest, set(result.bad_nodes) == bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(20261122)
    started = time.perf_counter()
    print(
        "| N | ceil(log2 N) | 1 bad: rounds mean / max | jobs mean | widest round | "
        "2 bad: rounds mean / max | jobs mean | widest round | all found |"
    )
    print("|---:|---:|---|---:|---:|---|---:|---:|---|")
    for count in SIZES:
        cells = [str(count), str(math.ceil(math.log2(count)))]
        found = True
        for bad_count in (1, 2):
            if bad_count >= count:  # every node bad: reported as widespread, nobody named
                cells += ["-", "-", "-"]
                continue
            runs = [trial(count, bad_count, rng) for _ in range(args.trials)]
            rounds = [r[0] for r in runs]
            cells += [
                f"{statistics.mean(rounds):.2f} / {max(rounds)}",
                f"{statistics.mean(r[1] for r in runs):.1f}",
                str(max(r[2] for r in runs)),
            ]
            found = found and all(r[3] for r in runs)
        cells.append("yes" if found else "NO")
        print("| " + " | ".join(cells) + " |")
    print(f"\n{args.trials} trials per N and bad-node count; {time.perf_counter() - started:.1f} s in all")


if __name__ == "__main__":
    main()
