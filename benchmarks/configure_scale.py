"""How a baked configure grows with the node count: local clusters of 2, 4, 8 and 15 compute nodes.

For each size (1 controller + N compute nodes, from the baked image) and each design, it brings the
cluster up, runs ``gpufleet configure`` once (the baked configure: the install phase skipped), and records:

- **up**, **configure**, and their sum: wall times. In the boot design the nodes configure themselves from
  their boot, during ``up``, and configure waits for their results: only the sum compares the designs;
- **control CPU**: user + system seconds of the process tree on the machine that runs gpufleet (gpufleet,
  ansible-runner, ansible-playbook and its forked workers, ssh): ``RUSAGE_CHILDREN`` of this process
  around the ``gpufleet configure`` child;
- **node CPU**: what the cluster's containers used since they started (their cgroups' ``cpu.stat`` /
  ``cpuacct.usage``), and of it the controller's;
- **module runs per node**: from the run's ansible events (the artifacts folder of the last run on this
  machine), the task results per host whose action runs on the node (not the actions that run on the
  control side: assert, set_fact, include_vars, ...); a play that ran on the head or on the nodes keeps
  its events there (not counted).

Then it fits a line (least squares) to each column against N: the slope is the cost per added node.
Designs (``--designs``): ``push`` (``GPUFLEET_CONFIGURE_FROM=here``: gpufleet's machine runs Ansible over
one connection per node), ``head`` (``GPUFLEET_CONFIGURE_FROM=head``: gpufleet ships the playbooks to the
controller node, which runs Ansible over the cluster's network; docs/architecture.md "Configure at fleet
scale") and ``boot`` (the default on a baked cluster: each node runs its own configure phase at boot and
``gpufleet configure`` waits for the results; docs/boot-configure.md). Each run checks that its configure
went the design's way (the state's ``at_boot``).

    sudo flock /work/cluster.lock .venv/bin/python benchmarks/configure_scale.py \
        [--sizes 2 4 8 15] [--designs push boot] [--prefix cs]
    .venv/bin/python benchmarks/configure_scale.py --count <job_events folder of a run made already>

The nodes are the plain local ones minus the PyTorch payload (``software.pytorch`` and the training
check left out of the spec), which the configure phase does not touch; the baked image is built once
(``gpufleet image build``) if podman does not have it. Set ``GPUFLEET_HOME`` to a copy of the checkout
to keep the roles (and the baked image's hash) fixed while others edit the tree.
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
from typing import Any

import yaml

from local_cluster import children_cpu_seconds, node_cpu_seconds  # benchmarks/local_cluster.py

ROOT = Path(os.environ.get("GPUFLEET_HOME") or Path(__file__).resolve().parents[1])
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")

# Actions that run in the control process (ansible-core's action plugins that make no module run on the
# node): ansible/plugins/action/{assert,set_fact,include_vars,debug,fail,...}.py in ansible-core 2.19.
LOCAL_ACTIONS = frozenset(
    {
        "assert",
        "set_fact",
        "include_vars",
        "debug",
        "fail",
        "meta",
        "validate_argument_spec",
        "group_by",
        "add_host",
        "set_stats",
        "include_tasks",
        "import_tasks",
        "include_role",
        "import_role",
        "pause",
    }
)


def gpufleet(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    done = subprocess.run(
        [GPUFLEET, *args, "--json"], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"gpufleet {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout)


def remote_runs_per_host(events_dir: Path) -> dict[str, int]:
    """Task results per host whose action ran on the node, from ansible-runner's job events."""
    runs: dict[str, int] = {}
    for path in events_dir.glob("*.json"):
        event = json.loads(path.read_text())
        if event.get("event") not in ("runner_on_ok", "runner_on_failed"):
            continue
        data = event.get("event_data", {})
        action = str(data.get("task_action", "")).rsplit(".", 1)[-1]
        if action in LOCAL_ACTIONS or data.get("res", {}).get("_ansible_delegated_vars"):
            continue
        host = str(data.get("host", ""))
        runs[host] = runs.get(host, 0) + 1
    return runs


def newest_events(state_dir: Path, cluster: str) -> Path | None:
    artifacts = state_dir / cluster / "logs" / "ansible" / "artifacts"
    found = sorted(artifacts.glob("*/job_events"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def spec_for(size: int, prefix: str, workdir: Path) -> tuple[str, Path]:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = f"{prefix}{size}"
    spec["node_groups"][1]["count"] = size
    spec.pop("software", None)  # no PyTorch in the image: the configure phase does not touch it
    spec["validation"].pop("training", None)
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return spec["name"], path


# GPUFLEET_CONFIGURE_FROM per design (None: unset, auto: a local cluster of baked nodes configures at boot).
SWITCH = {"push": "here", "head": "head", "boot": None}


def measure(size: int, design: str, workdir: Path, prefix: str) -> dict[str, float]:
    name, path = spec_for(size, prefix, workdir)
    state_dir = workdir / "state"
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(state_dir), "GPUFLEET_HOME": str(ROOT)}
    env.pop("GPUFLEET_CONFIGURE_FROM", None)
    if SWITCH[design]:
        env["GPUFLEET_CONFIGURE_FROM"] = str(SWITCH[design])
    gpufleet(["image", "build", str(path)], env, workdir)  # reuses the baked image when podman has it
    try:
        up, _ = gpufleet(["up", str(path)], env, workdir)
        control_before = children_cpu_seconds()
        wall, result = gpufleet(["configure", str(path)], env, workdir)
        control_cpu = children_cpu_seconds() - control_before
        # Since the nodes started: in the boot design each node's own play runs from its boot, during up.
        node_cpu = node_cpu_seconds(name)
        controller_cpu = node_cpu_seconds(name, f"{name}-controller")
        record = json.loads((state_dir / name / "state.json").read_text())  # before down removes it
        at_boot = bool(record.get("phases", {}).get("configure", {}).get("at_boot"))
        events = newest_events(state_dir, name)
        runs = remote_runs_per_host(events) if events else {}  # none for head and boot: they stay there
    finally:
        try:
            gpufleet(["down", str(path)], env, workdir)
        except SystemExit as failed:  # keeps the error of the step that failed, if one did
            print(f"# {name}: {failed}", flush=True)
    phase = str(result.get("install_phase", ""))
    if not phase.startswith("skipped"):
        raise SystemExit(f"{name}: the configure was not the baked one: {phase}")
    if (design == "boot") != at_boot:
        raise SystemExit(f"{name}: the {design} design's configure {'did not' if at_boot else 'did'} push")
    compute = [count for host, count in runs.items() if "-compute-" in host]
    return {
        "size": size,
        "up": up,
        "wall": wall,
        "total": up + wall,
        "control_cpu": control_cpu,
        "node_cpu": node_cpu,
        "controller_cpu": controller_cpu,
        "runs_per_compute": sum(compute) / len(compute) if compute else float("nan"),
        "runs_controller": float(sum(c for h, c in runs.items() if "-compute-" not in h)),
        "load": os.getloadavg()[0],
    }


def slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line through (x, y): (slope, intercept)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else 0.0
    return b, mean_y - b * mean_x


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[2, 4, 8, 15],
        help="compute nodes (the local backend runs at most 16 containers)",
    )
    parser.add_argument("--designs", nargs="+", default=["push", "boot"], choices=sorted(SWITCH))
    parser.add_argument("--prefix", default="cs", help="cluster names: PREFIX2, PREFIX4, ...")
    parser.add_argument(
        "--count",
        type=Path,
        metavar="JOB_EVENTS",
        help="only count the module runs per host of a run that was made already (its job_events folder, "
        "e.g. a cluster test's state/reports/<run>/logs/ansible/artifacts/<id>/job_events), and stop",
    )
    options = parser.parse_args()
    if options.count:
        print(json.dumps(dict(sorted(remote_runs_per_host(options.count).items()))))
        return
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-scale-") as tmp:
        designs = list(options.designs)
        for size in options.sizes:
            for design in list(designs):  # the designs alternate at each size: same machine, same minute
                try:
                    row = measure(size, design, Path(tmp), options.prefix)
                except SystemExit as failed:  # one design failing leaves the other's measurements
                    print(f"# {design} failed at {size} nodes, dropped: {failed}", flush=True)
                    designs.remove(design)
                    continue
                rows.append((design, row))
                print(f"# {design} {json.dumps({k: round(v, 2) for k, v in row.items()})}", flush=True)
    print(
        "| design | compute nodes | load | up | configure | up + configure | control CPU (configure) "
        "| node CPU | of it, the controller | module runs per compute node |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for design, r in rows:
        print(
            f"| {design} | {r['size']:.0f} | {r['load']:.1f} | {r['up']:.1f} s | {r['wall']:.1f} s "
            f"| {r['total']:.1f} s | {r['control_cpu']:.1f} s | {r['node_cpu']:.1f} s "
            f"| {r['controller_cpu']:.1f} s | {r['runs_per_compute']:.1f} |"
        )
    columns = ("total", "wall", "control_cpu", "node_cpu", "controller_cpu")
    print(
        "\n| design | per added node: up + configure | configure | control CPU | node CPU | controller CPU "
        "| fixed part: up + configure | control CPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for design in options.designs:
        mine = [r for d, r in rows if d == design]
        if len(mine) < 2:
            continue
        fit = {column: slope([(r["size"], r[column]) for r in mine]) for column in columns}
        print(
            f"| {design} | {fit['total'][0]:.2f} s | {fit['wall'][0]:.2f} s | {fit['control_cpu'][0]:.2f} s "
            f"| {fit['node_cpu'][0]:.2f} s | {fit['controller_cpu'][0]:.2f} s | {fit['total'][1]:.1f} s "
            f"| {fit['control_cpu'][1]:.1f} s |"
        )


if __name__ == "__main__":
    main()
