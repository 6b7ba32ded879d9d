"""Time the local backend's whole cycle: up, configure, validate, the idempotent re-run, down.

For 3 and 5 nodes (1 controller + 2 or 4 compute), in three modes. Every phase runs through the
``gpufleet`` command as a user runs it. Prints a Markdown table; docs/benchmarks.md records the results.

- ``cold``: no baked image (removed first); ``gpufleet image build`` is timed and counted in
  up-to-validated, as ``gpufleet run`` does on its first use. The node images stay (other clusters on
  a shared machine run from them); ``--from-scratch`` removes them too, so debootstrap is counted;
- ``warm``: the node image cached, no baked image: configure installs every package (the path before
  issue 11, and still the path of ``up`` without a baked image);
- ``baked``: the baked image present: configure does only the per-cluster work.

    sudo .venv/bin/python benchmarks/local_cluster.py [--nodes 3 5] [--modes cold warm baked] [--prefix spd]

"CPU" is the CPU time a phase cost the nodes (their cgroups) and gpufleet with the Ansible it ran:
unlike wall time, it hardly moves when other work shares the machine.

Targets (issue 11): baked, 3 nodes: up to validated <= 30 s, idempotent re-run <= 10 s with 0 changed;
5 nodes <= 45 s; cold not slower than before (119.9 s for 3 nodes, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


def podman_images(kind: str) -> list[str]:
    """gpufleet's images: ``node`` (base and node image) or ``baked``."""
    done = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    found = [line for line in done.stdout.splitlines() if "gpufleet-" in line]
    baked = [line for line in found if "gpufleet-baked" in line]
    return baked if kind == "baked" else [line for line in found if line not in baked]


def remove_images(kind: str) -> None:
    for image in podman_images(kind):
        subprocess.run(["podman", "rmi", image], capture_output=True, check=True)


def node_cpu_seconds(cluster: str, node: str | None = None) -> float:
    """CPU time the cluster's nodes (or its one ``node``) have used since they started (their cgroups'
    accounting)."""
    only = ["--filter", f"name=^{node}$"] if node else []
    ids = subprocess.run(
        ["podman", "ps", "-q", "--no-trunc", "--filter", f"label=gpufleet.cluster={cluster}", *only],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    total = 0.0
    for container in ids:
        cgroup = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.CgroupPath}}", container],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        v1 = Path("/sys/fs/cgroup/cpuacct") / cgroup.lstrip("/") / "cpuacct.usage"
        v2 = Path("/sys/fs/cgroup") / cgroup.lstrip("/") / "cpu.stat"
        if v1.exists():
            total += int(v1.read_text()) / 1e9
        elif v2.exists():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            total += int(usage["usage_usec"]) / 1e6
    return total


def children_cpu_seconds() -> float:
    """User + system time of this process's finished children (gpufleet and the Ansible it ran)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_of(cluster: str, run: Callable[[], tuple[float, dict]]) -> tuple[float, dict, float]:
    """Run one phase; also return the CPU seconds it cost the nodes and gpufleet (load-independent)."""
    before = node_cpu_seconds(cluster) + children_cpu_seconds()
    seconds, document = run()
    return seconds, document, node_cpu_seconds(cluster) + children_cpu_seconds() - before


def timed(args: list[str], env: dict[str, str], cwd: Path, ok: tuple[int, ...] = (0,)) -> tuple[float, dict]:
    start = time.monotonic()
    done = subprocess.run(
        [GPUFLEET, *args, "--json"], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    seconds = time.monotonic() - start
    if done.returncode not in ok:
        raise SystemExit(f"gpufleet {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def cycle(
    nodes: int, mode: str, workdir: Path, from_scratch: bool, prefix: str
) -> dict[str, float | int | bool]:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = f"{prefix}{nodes}"
    spec["node_groups"][1]["count"] = nodes - 1
    path = workdir / f"{prefix}{nodes}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(workdir / "state")}
    bake = 0.0
    if mode in ("cold", "warm"):
        remove_images("baked")
    if mode == "cold":
        if from_scratch:
            remove_images("node")
        bake, _ = timed(["image", "build", str(path)], env, workdir)
    elif mode == "baked":
        timed(["image", "build", str(path)], env, workdir)  # reuses the image when it is there
    try:
        up, _ = timed(["up", str(path)], env, workdir)
        configure, first, configure_cpu = cpu_of(
            spec["name"], lambda: timed(["configure", str(path)], env, workdir)
        )
        validate, report = timed(
            ["validate", str(path), "--out", str(workdir / f"report{nodes}{mode}")], env, workdir, ok=(0, 1)
        )  # exit 1: the gate failed (recorded: a loaded machine can miss the bandwidth floor)
        rerun, second, rerun_cpu = cpu_of(spec["name"], lambda: timed(["configure", str(path)], env, workdir))
    finally:
        down, _ = timed(["down", str(path)], env, workdir)
    if second["changed"] != 0 or (mode != "warm") != first["install_phase"].startswith("skipped"):
        raise SystemExit(
            f"unexpected: passed={report['passed']} re-run changed={second['changed']} "
            f"install phase {first['install_phase']} in mode {mode}"
        )
    return {
        "bake": bake,
        "up": up,
        "configure": configure,
        "validate": validate,
        "up_to_validated": bake + up + configure + validate,
        "rerun": rerun,
        "rerun_changed": second["changed"],
        "configure_cpu": configure_cpu,
        "rerun_cpu": rerun_cpu,
        "down": down,
        "changed_first": first["changed"],
        "passed": report["passed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 5])
    parser.add_argument(
        "--modes", nargs="+", default=["cold", "warm", "baked"], choices=["cold", "warm", "baked"]
    )
    parser.add_argument(
        "--from-scratch", action="store_true", help="cold: remove the node images too (debootstrap counted)"
    )
    parser.add_argument(
        "--prefix", default="bench", help="cluster names: PREFIX3, PREFIX5 (unique on a shared machine)"
    )
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        for nodes in options.nodes:
            for mode in options.modes:
                result = cycle(nodes, mode, Path(tmp), options.from_scratch, options.prefix)
                rows.append((nodes, mode, result))
                print(
                    f"# {nodes} nodes {mode}: {json.dumps({k: round(v, 1) for k, v in result.items()})}",
                    flush=True,
                )
    print(
        "| nodes | mode | bake | up | configure (CPU) | validate | up to validated "
        "| idempotent re-run (changed, CPU) | down |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for nodes, mode, r in rows:
        print(
            f"| {nodes} | {mode} | {r['bake']:.1f} s | {r['up']:.1f} s | "
            f"{r['configure']:.1f} s ({r['configure_cpu']:.0f} s) | {r['validate']:.1f} s | "
            f"{r['up_to_validated']:.1f} s{'' if r['passed'] else ' (gate failed)'} | "
            f"{r['rerun']:.1f} s ({r['rerun_changed']}, {r['rerun_cpu']:.0f} s) | {r['down']:.1f} s |"
        )


if __name__ == "__main__":
    main()
