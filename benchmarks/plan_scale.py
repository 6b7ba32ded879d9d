"""`gpufleet plan` at scale: wall time and peak memory for 16, 256 and 1,024 p5.48xlarge nodes.

Each size runs `gpufleet plan SPEC --json` in a fresh process (as a user would), offline, on a spec
made from examples/aws-p5.yaml with the compute count changed; the child's peak RSS comes from
wait4(). Prints a Markdown table for docs/benchmarks.md ("Plan (AWS)").

    python benchmarks/plan_scale.py [--sizes 16 256 1024] [--repeat 3]

Aim: 1,024 nodes in <= 30 s and <= 1.5 GB, with the time per node flat as the fleet grows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "aws-p5.yaml"


def spec_for(nodes: int, folder: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    for group in data["node_groups"]:
        if "compute" in group["roles"]:
            group["count"] = nodes
    path = folder / f"p5-{nodes}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def gpufleet() -> list[str]:
    found = shutil.which("gpufleet")
    return [found] if found else [sys.executable, "-m", "gpufleet.cli.app"]


def run_once(spec: Path) -> tuple[float, float, int]:
    """Seconds, peak RSS in MiB, and resources planned, for one `gpufleet plan --json`."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(
            [*gpufleet(), "plan", str(spec), "--json"], stdout=out, stderr=subprocess.PIPE
        )
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        stderr = child.stderr.read().decode() if child.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"gpufleet plan failed for {spec}:\n{stderr}")
        out.seek(0)
        resources = len(json.load(out)["resources"])
    return seconds, usage.ru_maxrss / 1024, resources  # ru_maxrss is KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the fastest is reported")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in args.sizes:
            spec = spec_for(nodes, Path(tmp))
            runs = [run_once(spec) for _ in range(args.repeat)]
            seconds = min(r[0] for r in runs)
            memory = max(r[1] for r in runs)
            rows.append((nodes, runs[0][2], seconds, memory))
            print(f"{nodes} nodes: {seconds:.2f} s, {memory:.0f} MiB", file=sys.stderr, flush=True)
    print("| p5 nodes | resources | wall time (s) | ms per node | peak RSS (MiB) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for nodes, resources, seconds, memory in rows:
        print(f"| {nodes} | {resources} | {seconds:.2f} | {1000 * seconds / nodes:.1f} | {memory:.0f} |")


if __name__ == "__main__":
    main()
