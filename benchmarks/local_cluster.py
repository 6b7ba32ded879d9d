"""Time the local backend's whole cycle: up, configure, validate, the idempotent re-run, down.

For 3 and 5 nodes (1 controller + 2 or 4 compute), cold (the node images removed first, so debootstrap
and the image build are included) and warm (images cached). Every phase runs through the ``gpufleet``
command as a user runs it. Prints a Markdown table; docs/benchmarks.md records the results.

    sudo .venv/bin/python benchmarks/local_cluster.py [--nodes 3 5] [--modes cold warm]

Targets (issue 2): warm up-to-validated <= 90 s for 3 nodes; idempotent re-run <= 20 s; down <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def podman_images() -> list[str]:
    done = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if "gpufleet-" in line]


def timed(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, dict]:
    start = time.monotonic()
    done = subprocess.run(
        [GPUFLEET, *args, "--json"], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"gpufleet {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def cycle(nodes: int, mode: str, workdir: Path) -> dict[str, float | int]:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = f"bench{nodes}"
    spec["node_groups"][1]["count"] = nodes - 1
    path = workdir / f"bench{nodes}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(workdir / "state")}
    if mode == "cold":
        for image in podman_images():
            subprocess.run(["podman", "rmi", "-f", image], capture_output=True, check=False)
    up, _ = timed(["up", str(path)], env, workdir)
    configure, first = timed(["configure", str(path)], env, workdir)
    validate, report = timed(
        ["validate", str(path), "--out", str(workdir / f"report{nodes}{mode}")], env, workdir
    )
    rerun, second = timed(["configure", str(path)], env, workdir)
    down, _ = timed(["down", str(path)], env, workdir)
    if not report["passed"] or second["changed"] != 0:
        raise SystemExit(f"unexpected: passed={report['passed']} re-run changed={second['changed']}")
    return {
        "up": up,
        "configure": configure,
        "validate": validate,
        "up_to_validated": up + configure + validate,
        "rerun": rerun,
        "rerun_changed": second["changed"],
        "down": down,
        "changed_first": first["changed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--modes", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        for nodes in options.nodes:
            for mode in options.modes:
                result = cycle(nodes, mode, Path(tmp))
                rows.append((nodes, mode, result))
                print(
                    f"# {nodes} nodes {mode}: {json.dumps({k: round(v, 1) for k, v in result.items()})}",
                    flush=True,
                )
    print(
        "| nodes | cache | up | configure | validate | up to validated | idempotent re-run (changed) | down |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for nodes, mode, r in rows:
        print(
            f"| {nodes} | {mode} | {r['up']:.1f} s | {r['configure']:.1f} s | {r['validate']:.1f} s | "
            f"{r['up_to_validated']:.1f} s | {r['rerun']:.1f} s ({r['rerun_changed']}) | {r['down']:.1f} s |"
        )


if __name__ == "__main__":
    main()
