"""Parse time and peak memory for a large nccl-tests log: a real table buried in NCCL_DEBUG=INFO output.

Builds a ~100 MB log (size with --mb) from the fixtures: fixture 19's NCCL INFO lines (NCCL_DEBUG=TRACE
output of an A100 run, with Open MPI tags added, as a many-rank job prints them) repeated before, inside
and after fixture 15's table (32 rows, 8 B to 16 GiB), then parses it with gpufleet's parser and reports
wall time, throughput, the peak of Python allocations during the parse (tracemalloc) and the process's
peak RSS. The parser reads line by line: its peak allocation stays far below the file size.

    python benchmarks/validate_parse.py [--mb 100] [--keep PATH]

Results are recorded in docs/benchmarks.md under "Validation".
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

from gpufleet.validate.nccl_log import parse_log

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "nccl-tests"


def build_log(path: Path, megabytes: int) -> tuple[int, int]:
    """Write the synthetic big log; returns (bytes, lines)."""
    info = [
        line
        for line in (FIXTURES / "19-a100-gather-ib-info-interleaved-truncated.log").read_text().splitlines()
        if "NCCL INFO" in line
    ]
    table = (FIXTURES / "15-mi300x-rccl-2node-allreduce.log").read_text().splitlines()
    header_end = next(i for i, line in enumerate(table) if line.lstrip("#").strip().startswith("(B)")) + 1
    footer_start = next(i for i, line in enumerate(table) if "Errors with asterisks" in line)
    head, rows, foot = table[:header_end], table[header_end:footer_start], table[footer_start:]
    block = "".join(f"[1,{rank}]<stdout>:{line}\n" for rank in range(16) for line in info)
    target = megabytes * 1_000_000
    lines = 0
    with path.open("w", encoding="utf-8") as out:
        written = 0
        # 45% of the INFO noise before the header, 10% spread between the rows, the rest after
        while written < target * 0.45:
            written += out.write(block)
            lines += block.count("\n")
        for line in head:
            written += out.write(line + "\n")
            lines += 1
        between = max(1, int(target * 0.10 / len(block) / len(rows)))
        for row in rows:
            for _ in range(between):
                written += out.write(block)
                lines += block.count("\n")
            written += out.write(row + "\n")
            lines += 1
        while written < target - 2000:
            written += out.write(block)
            lines += block.count("\n")
        for line in foot:
            written += out.write(line + "\n")
            lines += 1
    return path.stat().st_size, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the generated log in MB (default 100)")
    parser.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "big-nccl-tests.log"
        started = time.perf_counter()
        size, lines = build_log(path, args.mb)
        built = time.perf_counter() - started
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        started = time.perf_counter()
        tests = parse_log(path)
        seconds = time.perf_counter() - started
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        (test,) = tests
        assert len(test.rows) == 32 and test.avg_busbw == 92.3318, test.to_json()
        started = time.perf_counter()
        parse_log(path)
        untraced = time.perf_counter() - started
    print(f"log: {size / 1e6:.1f} MB, {lines:,} lines ({len(test.rows)} table rows), built in {built:.1f} s")
    print(
        f"parse (tracemalloc on): {seconds:.2f} s; without tracemalloc: {untraced:.2f} s "
        f"= {size / 1e6 / untraced:.0f} MB/s, {lines / untraced / 1e6:.2f} M lines/s"
    )
    share = peak / size * 100
    print(f"peak Python allocation during the parse: {peak / 1e6:.2f} MB ({share:.2f} % of the file)")
    print(f"process peak RSS: {rss_after / 1024:.0f} MB (before the parse: {rss_before / 1024:.0f} MB)")
    evidence = sum(test.transports.values())
    print(f"transport found among the noise: {test.transport}, evidence lines: {evidence:,}")


if __name__ == "__main__":
    main()
