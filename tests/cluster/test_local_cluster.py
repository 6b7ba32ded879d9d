"""End to end on a real local cluster: 1 controller + 2 compute podman nodes, taken from spec to validated
to gone, through the ``gpufleet`` command exactly as a user runs it. One cluster serves the module's tests in
file order, as a user's cluster serves one job after another: the main cycle (up, configure, validate, a
re-run, failing gates), jobs and validation inside a container image (issue 22), GPU utilization monitoring
(issue 20), and ``down`` with its utilization report (a training job resumed after its node is killed: on
test_faults.py's kill cluster, whose Slurm timeouts are set for it). The module's fixture tears the cluster
down whatever happens.

Needs root, podman, runc and debootstrap (``scripts/bootstrap.sh`` installs them), and squashfs-tools for the
container images. The first run on a machine builds the node image and bakes the roles' install phase into it
(conftest.py, a few minutes); later runs reuse both, so the nodes here configure only per-cluster work.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from cluster_cli import (
    GPUFLEET,
    ROOT,
    Cli,
    labelled,
    local_podman,
    package_state,
    podman,
    require_local_backend,
    slurm_on,
)

from gpufleet.catalog.slurm import DEFAULT_SLURM, SLURM_RELEASES
from gpufleet.inventory.model import Inventory
from gpufleet.monitoring.prometheus import PrometheusClient, prometheus_url

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("baked_image")]

# GPUFLEET_E2E_NAME lets two checkouts on one machine run this test side by side.
NAME = os.environ.get("GPUFLEET_E2E_NAME", "e2e")
LABEL = f"gpufleet.cluster={NAME}"


def leftovers() -> dict[str, list[str]]:
    return labelled(LABEL)


def task_results(artifacts: str, task: str) -> dict[str, str]:
    """{host: msg} of the successful runs of ``task`` in an ansible-runner artifact folder's events."""
    found = {}
    for path in sorted(Path(artifacts, "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task:
            found[data["host"]] = str(data.get("res", {}).get("msg", ""))
    return found


# What a test leaves for the later ones on the same cluster (the uninterrupted run's parameter hash, the
# job ids that monitoring saw).
SHARED: dict[str, object] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path, Path]]:
    require_local_backend()
    workdir = tmp_path_factory.mktemp("e2e")
    state = workdir / "state"
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = NAME
    spec_path = workdir / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    cli = Cli(workdir, state)
    assert not any(leftovers().values()), f"a previous run left {leftovers()}"
    try:
        yield cli, spec_path, state
    finally:
        if any(leftovers().values()):  # the test failed half-way: leave nothing behind
            subprocess.run(
                [GPUFLEET, "down", str(spec_path)], cwd=workdir, env=cli.env, capture_output=True, check=False
            )


def test_up_configure_validate_reconfigure(cluster, baked_image: dict) -> None:
    cli, spec, state = cluster

    up = cli.json("up", str(spec))
    nodes = [f"{NAME}-controller", f"{NAME}-compute-0", f"{NAME}-compute-1"]
    assert [h["name"] for h in up["hosts"]] == nodes
    assert sorted(leftovers()["containers"]) == sorted(nodes)
    assert (state / NAME / "inventory.yml").exists()
    assert oct((state / NAME / "munge.key").stat().st_mode & 0o777) == "0o400"

    # A stopped node comes back on a re-run of up (a failed or interrupted run can be re-run). It is stopped
    # mid-play (its own configure runs after up returns) with time to write why ("boot: stopped"): its next
    # boot replaces that result before up returns (the unit's ExecStartPre), and configure waits for the new
    # play rather than failing on the old one (CI of stop 44 did, when the stop's result landed in time).
    podman("stop", "-t", "10", f"{NAME}-compute-1")
    cli("up", str(spec))
    status = cli.json("status", str(spec))
    assert {n["name"]: n["running"] for n in status["nodes"]} == {
        f"{NAME}-controller": True,
        f"{NAME}-compute-0": True,
        f"{NAME}-compute-1": True,
    }

    # The nodes run the session's baked image (conftest.py): configure does only the per-cluster work
    # and installs no package.
    inventory = yaml.safe_load((state / NAME / "inventory.yml").read_text())
    assert inventory["all"]["vars"]["gpufleet_baked_image_hash"] == baked_image["hash"]
    packages = {node: package_state(node) for node in nodes}
    first = cli.json("configure", str(spec))
    assert first["ok"] is True and first["changed"] > 0
    # Every node runs the one Slurm the slurm role built from SchedMD's release (docs/slurm.md), baked in
    # (24.11's commands read slurm.conf even for -V, so this asks after configure wrote it).
    release = SLURM_RELEASES[DEFAULT_SLURM].version
    for node in nodes:
        slurm = slurm_on(node)
        assert slurm["slurmd"] == slurm["sinfo"] == f"slurm {release}", (node, slurm)
        assert str(slurm["package"]).startswith(f"gpufleet-slurm {release}-1+gf"), (node, slurm)
        assert slurm["debian"] == [], (node, slurm)
    # The nodes configured themselves at boot from the baked image (docs/boot-configure.md): configure pushed
    # nothing and read each node's result from the shared filesystem, where each node wrote it: the volume is
    # mounted at /shared on every node (each node's own mount check passed), and the controller read every
    # node's file there (the cross-node check of this design, configure/boot_wait.py).
    assert first["artifacts"] is None, first["artifacts"]
    results = "/shared/.gpufleet/configure"
    assert sorted(_sh(nodes[0], f"ls {results}")) == sorted(f"{node}.json" for node in nodes)
    for node in nodes:
        result = json.loads("\n".join(_sh(nodes[0], f"cat {results}/{node}.json")))
        assert result["ok"] is True and result["host"] == node and result["run"] == "boot", result
        statuses = {(t["task"], t["status"]) for t in result["tasks"]}
        assert ("Assert that the filesystem is mounted where the inventory says", "ok") in statuses, node
        assert _sh(node, "findmnt -n -o TARGET /shared") == ["/shared"], node
    assert podman("exec", f"{NAME}-compute-0", "ls", "-A", "/shared") == [".gpufleet"], "probe files left"
    assert first["install_phase"] == f"skipped: baked image {baked_image['hash']}"
    # The mpi role's parameters are a block below Debian's own settings, and they are the ones in effect.
    mca = podman("exec", f"{NAME}-compute-0", "cat", "/etc/openmpi/openmpi-mca-params.conf")
    assert "btl = ^uct,openib,ofi" in mca, mca
    assert mca[-1] == "# END gpufleet role mpi: Open MPI MCA parameters", mca
    effective = podman("exec", f"{NAME}-compute-0", "ompi_info", "--all", "--parsable")
    assert "mca:btl:base:param:btl:value:vader,tcp,self" in effective
    assert "mca:mpi:base:param:mpi_yield_when_idle:value:true" in effective
    # Configless, dynamic nodes (docs/slurm.md): slurm.conf is rendered on the controller only (it names no
    # node); each compute node's slurmd fetched it and registered itself, drained until validated.
    rendered = [task for task in first["changed_tasks"] if task.endswith(": Render slurm.conf")]
    assert rendered == [f"{NAME}-controller: Render slurm.conf"], first["changed_tasks"]
    assert {node: package_state(node) for node in nodes} == packages
    ctl, computes = nodes[0], nodes[1:]
    assert _sh(computes[0], "test -e /etc/slurm/slurm.conf && echo present || echo fetched") == ["fetched"]
    registered = _sh(ctl, f"sinfo -h -N -n {','.join(computes)} -o '%N|%T|%E'")
    assert sorted(registered) == [f"{node}|drained|gpufleet: not validated" for node in computes], registered
    # No job lands on a node before validate releases it: one submitted now stays pending.
    waiting = _sh(ctl, "sbatch --parsable -N2 --wrap 'hostname'")[0]
    time.sleep(5)  # the main scheduler runs on every submission; a start would be seen by now
    assert _sh(ctl, f"squeue -h -j {waiting} -o '%T|%r'")[0].startswith("PENDING|"), waiting

    report = cli.json("validate", str(spec), "--out", str(state.parent / "report"))
    assert report["passed"] is True, json.dumps(report, indent=1)[:4000]
    # validate held both nodes in its reservation, ran there, and released them: the waiting job runs.
    held = report["context"]["held for validation"]
    assert held.startswith(f"{', '.join(computes)} (reservation gpufleet-validate-{NAME}); released: "), held
    assert held.endswith("kept drained: none"), held
    assert _sh(ctl, "scontrol -o show reservation") == ["No reservations in the system"]
    _wait(
        f"job {waiting} to run once the nodes are released",
        lambda: "JobState=COMPLETED" in " ".join(_sh(ctl, f"scontrol -o show job {waiting}")),
        timeout=120,
    )
    released = _sh(ctl, f"sinfo -h -N -n {','.join(computes)} -o '%N %T'")
    assert all(line.split()[1] in ("idle", "mixed", "allocated") for line in released), released
    tests = {t["collective"]: t for t in report["tests"]}
    assert set(tests) == {"all_reduce", "all_gather"}
    for collective, test in tests.items():
        assert test["ranks"] == 2 and len(test["hosts"]) == 2, collective
        assert test["verdict"]["passed"] is True, test["verdict"]
        assert test["wrong_total"] == 0 and test["out_of_bounds"] == 0
        big = [row for row in test["rows"] if row["size"] >= 4 << 20]
        assert big and all(row["oop"]["busbw"] > 0 for row in big), collective
    assert (state.parent / "report" / "validation-report.md").exists()
    # The health check looked at /shared on each compute node: mounted (the volume) and writable.
    health = report["health"]["nodes"]
    mounts = {n["node"]: [c for c in n["checks"] if c["name"] == "filesystem"] for n in health}
    assert set(mounts) == {f"{NAME}-compute-0", f"{NAME}-compute-1"}, mounts
    assert all(len(c) == 1 and c[0]["status"] == "pass" and c[0]["message"].startswith("/shared ") for c in
               mounts.values()), mounts  # fmt: skip
    markdown = (state.parent / "report" / "validation-report.md").read_text()
    assert "Shared filesystem /shared (volume): mounted and writable on 2 of 2 nodes" in markdown
    # Every rank ran in the node's NCCL environment file, written by the ethernet role: the first task
    # of each node read the fabric and transport out of the file it sourced, and the log says so.
    for collective in tests:
        log = (state.parent / "report" / "logs" / f"{collective}.log").read_text()
        for node in (f"{NAME}-compute-0", f"{NAME}-compute-1"):
            line = (
                f"GPUFLEET_NCCL_ENV host={node} fabric=ethernet transport=Socket file=/etc/gpufleet/nccl.env"
            )
            assert line in log, log[-3000:]
    assert (
        report["context"]["NCCL environment"] == "fabric ethernet, transport Socket (/etc/gpufleet/nccl.env)"
    )
    env_file = "\n".join(podman("exec", f"{NAME}-compute-0", "cat", "/etc/gpufleet/nccl.env"))
    assert "export NCCL_NET=Socket" in env_file and "export NCCL_SOCKET_IFNAME=eth0" in env_file, env_file
    assert (state.parent / "report" / "busbw.png").stat().st_size > 10_000
    # The training check (validation.training): examples/jobs/train.sbatch through Slurm on both nodes.
    training = report["training"]
    assert training["passed"] is True, json.dumps(training, indent=1)[:4000]
    assert {c["name"]: c["status"] for c in training["checks"]} == {
        "join": "pass", "parameters": "pass", "loss": "pass", "stragglers": "pass", "allreduce": "info",
        "checkpoint": "pass",
    }  # fmt: skip
    assert sorted(r["host"] for r in training["per_rank"]) == [f"{NAME}-compute-0", f"{NAME}-compute-1"]
    assert (state.parent / "report" / "training.png").stat().st_size > 5_000
    print(f"\ntraining check figures: {json.dumps(training['figures'])}")

    # The ledger (issue 33): the validation above appended its figures to the state folder's ledger.
    ledger = cli.json("baseline", "--json")
    assert ledger["ledger"] == str(state / "ledger.jsonl")
    assert {(r["collective"], r["nodes"], r["instance_type"], r["tier"]) for r in ledger["runs"]} == {
        ("all_reduce", 2, "local", "pass"), ("all_gather", 2, "local", "pass"),
    }  # fmt: skip
    # The CPU benchmark prints no NCCL lines: the transport kept is the one the node's env file configured.
    assert all(r["busbw"] > 0 and r["transport_expected"] == "Socket" for r in ledger["runs"]), ledger
    # A second run gates on the first (validation.baseline: ledger). CPU ranks on two shared cores vary
    # more than GPUs, so the tiers are wide: pass at 0.3 x, drain below 0.1 x the site baseline.
    site = yaml.safe_load(spec.read_text())
    site["validation"].update(baseline="ledger", baseline_margin=0.3, drain_fraction=0.1)
    del site["validation"]["min_busbw"]  # an explicit floor would come before the site baseline
    site["validation"]["training"]["enabled"] = False
    site_spec = spec.with_name("site.yaml")
    site_spec.write_text(yaml.safe_dump(site))
    second_run = cli.json("validate", str(site_spec), "--out", str(state.parent / "site"))
    assert second_run["passed"] is True, json.dumps(second_run, indent=1)[:4000]
    assert {t["verdict"]["mode"] for t in second_run["tests"]} == {"site-baseline"}
    derived = cli.json("baseline", "--json")["site_baselines"]
    assert {(d["collective"], d["nodes"], d["runs"]) for d in derived} == {
        ("all_reduce", 2, 2),
        ("all_gather", 2, 2),
    }

    # Ready before measured: a node whose NCCL environment file is gone is named, and nothing is
    # benchmarked on it (validation.ready_timeout 0m: no wait for it to come back).
    podman("exec", f"{NAME}-compute-0", "rm", "/etc/gpufleet/nccl.env")
    unready = dict(site, validation={**site["validation"], "ready_timeout": "0m", "baseline": "catalog"})
    unready_spec = spec.with_name("unready.yaml")
    unready_spec.write_text(yaml.safe_dump(unready))
    named = cli.json("validate", str(unready_spec), "--out", str(state.parent / "unready"), expect=1)
    (sick,) = [n for n in named["health"]["nodes"] if not n["passed"]]
    assert sick["node"] == f"{NAME}-compute-0", named["health"]
    assert sick["checks"][0]["message"].startswith("not ready after 0m (validation.ready_timeout): "), sick
    assert "/etc/gpufleet/nccl.env is missing or empty" in sick["checks"][0]["message"]
    assert all(t["hosts"] == [f"{NAME}-compute-1"] for t in named["tests"]), named["tests"]

    # Configure from the head (issue 21, GPUFLEET_CONFIGURE_FROM=head, the default on cloud clusters): the
    # same playbook and roles, run by Ansible on the controller over the cluster's network, repair what a
    # node lost.
    head = Cli(cli.workdir, state, env={"GPUFLEET_CONFIGURE_FROM": "head"})
    repaired = head.json("configure", str(spec))
    assert repaired["ok"] is True and str(repaired["artifacts"]).endswith("ansible-head"), repaired
    assert repaired["install_phase"] == f"skipped: baked image {baked_image['hash']}"
    assert any(
        task.startswith(f"{NAME}-compute-0: ") and task.endswith("Write the NCCL environment file")
        for task in repaired["changed_tasks"]
    ), repaired["changed_tasks"]
    assert podman("exec", f"{NAME}-compute-0", "test", "-s", "/etc/gpufleet/nccl.env") == []

    # The nodes' own plays a second time (configure on a running cluster starts every node's unit again)
    # change nothing: the head's push and the nodes' own plays leave the same cluster.
    second = cli.json("configure", str(spec))
    assert second["changed"] == 0, second["changed_tasks"]
    assert second["artifacts"] is None, second["artifacts"]

    # A floor the cluster cannot reach fails the gate: exit 1, and the report says why.
    impossible = yaml.safe_load(spec.read_text())
    impossible["validation"]["min_busbw"] = {"all_reduce": 10_000.0, "all_gather": 10_000.0}
    impossible["validation"]["find_bad_nodes"] = False
    impossible["validation"]["training"]["enabled"] = False  # judged above; this run is about the floor
    strict = spec.with_name("strict.yaml")
    strict.write_text(yaml.safe_dump(impossible))
    failed = cli.json("validate", str(strict), "--out", str(state.parent / "strict"), expect=1)
    assert failed["passed"] is False
    assert all(not t["verdict"]["passed"] for t in failed["tests"])
    assert "floor" in json.dumps(failed["tests"][0]["verdict"])

    # A mount point with nothing mounted fails the health check: point the inventory at another folder.
    inventory_file = state / NAME / "inventory.yml"
    original = inventory_file.read_text()
    assert "mount_point: /shared" in original
    inventory_file.write_text(original.replace("mount_point: /shared", "mount_point: /srv"))
    unmounted = cli.json("validate", str(spec), "--out", str(state.parent / "unmounted"), expect=1)
    inventory_file.write_text(original)
    failing = {n["node"]: n["checks"] for n in unmounted["health"]["nodes"] if not n["passed"]}
    assert sorted(failing) == [f"{NAME}-compute-0", f"{NAME}-compute-1"], unmounted["health"]
    wrong = {"name": "filesystem", "status": "fail", "message": "/srv is not mounted (expected volume)"}
    assert all(wrong in checks for checks in failing.values()), failing


# ---- the spec is the truth; the environment's refusals are named (issue 38, docs/reliability.md) ----------


def test_a_node_whose_own_play_fails_is_named_drained_and_validated_again_before_it_takes_jobs(
    cluster, tmp_path
) -> None:
    """Issue 34: a node whose own configure fails (its NCCL environment file made a folder) is named with the
    failed task and drained with it as the reason; repaired, a re-run passes, and the node still takes no job
    until a validation passes with it (validate/release.py), which then releases it."""
    cli, spec, _state = cluster
    c0, c1, ctl = f"{NAME}-compute-0", f"{NAME}-compute-1", f"{NAME}-controller"
    _sh(c0, "rm -f /etc/gpufleet/nccl.env && mkdir /etc/gpufleet/nccl.env")
    broken = cli.json("configure", str(spec), expect=5)["error"]["message"]
    assert broken.startswith("1 node(s) failed their own configure and 0 never showed up"), broken
    # (the template lands inside the folder; the role's check that a job sources the file fails)
    failed_task = "Assert that a job sees exactly the settings the role chose"
    assert f"{c0}: play failed at '{failed_task}': sourcing /etc/gpufleet/nccl.env" in broken, broken
    reason = f"gpufleet: configure failed: {failed_task}"
    assert _sh(ctl, f"sinfo -h -N -n {c0} -o '%T|%E'") == [f"drained|{reason}"]
    _sh(c0, "rm -r /etc/gpufleet/nccl.env")
    assert cli.json("configure", str(spec))["ok"] is True
    assert podman("exec", c0, "test", "-s", "/etc/gpufleet/nccl.env") == []
    # Repaired, but not yet proven: still drained, and a job on both nodes waits.
    assert _sh(ctl, f"sinfo -h -N -n {c0} -o '%T|%E'") == [f"drained|{reason}"]
    waiting = _sh(ctl, "sbatch --parsable -N2 --wrap 'hostname'")[0]
    time.sleep(5)
    assert _sh(ctl, f"squeue -h -j {waiting} -o '%T'") == ["PENDING"], waiting
    data = yaml.safe_load(spec.read_text())
    data["validation"].update(collectives=["all_reduce"], max_bytes="16M", find_bad_nodes=False)
    data["validation"]["training"]["enabled"] = False
    quick = tmp_path / "quick.yaml"
    quick.write_text(yaml.safe_dump(data))
    report = cli.json("validate", str(quick), "--out", str(tmp_path / "report"))
    assert report["passed"] is True, json.dumps(report, indent=1)[:3000]
    held = report["context"]["held for validation"]
    assert held.startswith(f"{c0} (reservation gpufleet-validate-{NAME}); released: {c0}"), held
    _wait(
        f"job {waiting} to run once {c0} is released",
        lambda: "JobState=COMPLETED" in " ".join(_sh(ctl, f"scontrol -o show job {waiting}")),
        timeout=120,
    )
    states = _sh(ctl, f"sinfo -h -N -n {c0},{c1} -o '%T'")
    assert all(state in ("idle", "mixed", "allocated") for state in states), states


def test_another_spec_with_the_cluster_name_is_refused_and_a_small_disk_is_named(cluster, tmp_path) -> None:
    """Refusals that stop before anything runs, each a second or two: an up of another file with the cluster's
    name that would change its memory and mount point (it used to rewrite the inventory silently, exit 0); a
    configure of a spec with an image the cluster was not brought up with (it used to run 211 s, stage
    nothing and exit 0); a validate whose report folder is on a 1 MiB filesystem."""
    cli, spec, state = cluster
    inventory_file, record_file = state / NAME / "inventory.yml", state / NAME / "state.json"
    inventory_before, spec_before = inventory_file.read_text(), json.loads(record_file.read_text())["spec"]
    other = yaml.safe_load(spec.read_text())
    other["provider"]["node_memory_mb"] = 2048
    other["filesystem"]["mount_point"] = "/data"
    other_path = tmp_path / "spec.yaml"
    other_path.write_text(yaml.safe_dump(other))
    refused = cli.json("up", str(other_path), expect=7)["error"]
    assert refused["type"] == "SpecDrift" and f"not from {other_path}" in refused["message"], refused
    assert "provider.node_memory_mb: 1024 -> 2048" in refused["message"]
    assert "filesystem.mount_point: /shared -> /data" in refused["message"]
    assert f"gpufleet up --replace {other_path}" in refused["hint"]
    assert inventory_file.read_text() == inventory_before
    assert json.loads(record_file.read_text())["spec"] == spec_before

    imaged = yaml.safe_load(spec.read_text())
    imaged["software"]["container_image"] = "nvcr.io#nvidia/pytorch:25.01-py3"
    imaged_path = spec.with_name("imaged.yaml")
    imaged_path.write_text(yaml.safe_dump(imaged))
    stopped = cli.json("configure", str(imaged_path), expect=7)["error"]
    assert "software.container_image: (none) -> nvcr.io#nvidia/pytorch:25.01-py3" in stopped["message"]
    assert stopped["hint"].startswith("apply them with 'gpufleet up SPEC' (they change in place)"), stopped

    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        full = cli.json("validate", str(spec), "--out", str(small / "report"), expect=8)["error"]
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert full["kind"] == "environment" and f"({small}) has 1 MiB free" in full["message"], full
    assert f"df -h {small}" in full["hint"]


def _nsenter(node: str, command: str) -> None:
    """``command`` in ``node``'s mount and PID namespaces, as the host's root (the host's device cgroup, so
    a block device of the host can be mounted there). The PID namespace too: the node's /proc is its own
    PID namespace's, where a process from the host's has no /proc/self, and ``umount -l`` (util-linux
    2.38) then failed ("umount failed: No such file or directory", exit 32), leaving the mount."""
    pid = podman("inspect", "-f", "{{.State.Pid}}", node)[0]
    subprocess.run(["nsenter", "-t", pid, "-m", "-p", "--", "sh", "-c", command], check=True)


def _mounts_under(node: str, folder: str) -> list[str]:
    """The mount points under ``folder`` (not itself) in ``node``'s mount table."""
    return [
        line.split()[4]
        for line in podman("exec", node, "cat", "/proc/1/mountinfo")
        if line.split()[4].startswith(folder.rstrip("/") + "/")
    ]


def test_a_full_checkpoint_filesystem_and_a_node_slurm_drains_are_named(cluster, tmp_path) -> None:
    """The training job's folder (<mount>/.gpufleet/training) on a 16 MiB ext4 loop device, mounted in every
    node (one block device, one filesystem, as a shared one) and filled to under 1 MiB free: the job stops
    before its first step, naming path, needed and available (it was a raw OSError traceback). While it runs,
    Slurm drains a compute node (as it does when a node's SlurmdSpoolDir fills): the report names the node,
    Slurm's reason and the command that returns it (nothing said so before)."""
    cli, spec, _state = cluster
    ctl, c0, c1 = f"{NAME}-controller", f"{NAME}-compute-0", f"{NAME}-compute-1"
    image = tmp_path / "checkpoints.img"
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True)
    device = loop.stdout.strip()
    numbers = subprocess.run(["stat", "-c", "%t %T", device], check=True, capture_output=True, text=True)
    major, minor = (int(x, 16) for x in numbers.stdout.split())
    folder, node_device = "/shared/.gpufleet/training", "/dev/gpufleet-test-checkpoints"
    mounted: list[str] = []
    data = yaml.safe_load(spec.read_text())
    data["validation"].update(collectives=["all_reduce"], max_bytes="64K", gate_min_bytes="64K")
    data["validation"]["find_bad_nodes"] = False
    data["validation"]["training"]["steps"] = 10
    small_spec = spec.with_name("full.yaml")
    small_spec.write_text(yaml.safe_dump(data))
    drained = threading.Event()

    def drain_once_the_training_job_runs() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not drained.is_set():
            running = _sh(ctl, "squeue -h -t R -n gpufleet-train -o %i")
            if running:
                _sh(ctl, f"scontrol update nodename={c1} state=drain reason='SlurmdSpoolDir is full'")
                drained.set()
                return
            time.sleep(2)

    try:
        for node in (ctl, c0, c1):
            _nsenter(node, f"mknod {node_device} b {major} {minor} && mkdir -p {folder} && "
                           f"mount {node_device} {folder}")  # fmt: skip
            mounted.append(node)
        _sh(ctl, f"fallocate -l $(( $(df -B1 --output=avail {folder} | tail -1) - 786432 )) {folder}/filler")
        watcher = threading.Thread(target=drain_once_the_training_job_runs, daemon=True)
        watcher.start()
        report = cli.json("validate", str(small_spec), "--out", str(tmp_path / "report"), expect=1)
        drained.set()
        watcher.join(timeout=10)
    finally:
        for node in mounted:  # lazy: a finished job's folder may still be held a moment
            _nsenter(node, f"umount -l {folder} && rm -f {node_device}")
        subprocess.run(["losetup", "-d", device], check=False)
        _sh(ctl, f"scontrol update nodename={c1} state=resume >/dev/null 2>&1 || true")
    # Nothing left mounted under the shared filesystem: enroot binds it without MS_REC inside its user
    # namespace, where a mount left under it is locked and the bind fails with EINVAL ("enroot-mount: failed
    # to mount: /shared ... Invalid argument", torvalds/linux fs/namespace.c __do_loopback, read 2026-11-27);
    # the container steps later on this cluster bind it.
    assert {node: _mounts_under(node, "/shared") for node in (ctl, c0, c1)} == {ctl: [], c0: [], c1: []}
    training = report["training"]
    checkpoint = next(c for c in training["checks"] if c["name"] == "checkpoint")
    assert checkpoint["status"] == "fail", checkpoint
    assert " KiB free; the job's checkpoints need " in checkpoint["message"], checkpoint
    assert checkpoint["message"].startswith(f"{folder}/"), checkpoint
    assert not any(c["name"] == "finish" for c in training["checks"]), training["checks"]
    taken = report["slurm_took_out"]["nodes"]
    assert set(taken) == {c1} and taken[c1]["reason"] == "SlurmdSpoolDir is full", taken
    assert taken[c1]["resume"] == f"scontrol update nodename={c1} state=resume"
    # Back in service once slurmd answers again (24.11 read idle* - not responding - right after the resume).
    deadline = time.monotonic() + 120
    while (state := _sh(ctl, f"sinfo -h -n {c1} -o %t")[-1]) not in ("idle", "mix", "alloc"):
        assert time.monotonic() < deadline, f"the test returned {c1}, which still reads {state} after 120 s"
        time.sleep(2)


def test_a_blocked_rendezvous_names_where_it_stalled_and_quotes_the_job_log(cluster, tmp_path) -> None:
    """torchrun's rendezvous port blocked on the head node (iptables in its network namespace, from the
    host): the join check names the ranks, the nodes where torchrun ran without a worker starting, the
    rendezvous's node, and each node's own error from the job log (it named both nodes and hid the timeout,
    quoting sbatch's stderr instead of the job log). The head is the job's first node: dynamic nodes sit in
    slurmctld's node table in the order they first registered, not by name (roles/slurm/tasks/register.yml),
    and a job's node list follows that table, as `scontrol show node` lists it."""
    cli, spec, _state = cluster
    table = [
        line.split()[0].removeprefix("NodeName=")
        for line in _sh(f"{NAME}-controller", "scontrol -o show node")
    ]
    head = next(node for node in table if node.startswith(f"{NAME}-compute-"))
    data = yaml.safe_load(spec.read_text())
    data["validation"].update(collectives=["all_reduce"], max_bytes="64K", gate_min_bytes="64K")
    data["validation"]["find_bad_nodes"] = False
    data["validation"]["training"].update(steps=10, join_timeout=15)  # seconds
    blocked = spec.with_name("blocked.yaml")
    blocked.write_text(yaml.safe_dump(data))
    pid = podman("inspect", "-f", "{{.State.Pid}}", head)[0]
    rule = ["INPUT", "-i", "eth0", "-p", "tcp", "--dport", "29500", "-j", "DROP"]
    subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-I", *rule], check=True)
    try:
        report = cli.json("validate", str(blocked), "--out", str(tmp_path / "report"), expect=1)
    finally:
        subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-D", *rule], check=True)
    log = (tmp_path / "report" / "logs" / "training.log").read_text()
    print(f"\nthe blocked rendezvous's job log:\n{log[-4000:]}")
    join = next(c for c in report["training"]["checks"] if c["name"] == "join")
    assert join["status"] == "fail", join
    assert join["message"].startswith("rank(s) 0-1 of 2 did not join; "), join
    assert f"its rendezvous on {head} did not complete" in join["message"], (table, join)
    assert "no worker started there" in join["message"], join
    assert "; the job log says " in join["message"] and "Error" in join["message"], join


# ---- the MPIJob execution model (issue 35, docs/kubernetes.md) ---------------------------------------


def test_the_mpijob_execution_model_passes_the_gate_on_the_nodes(cluster, tmp_path) -> None:
    """What a Kubernetes validation's MPIJob does, for real on this cluster's nodes (tests/cluster/
    mpijob_model.py): the launcher's exact mpirun, the operator's hostfile and environment, each worker's
    files and node name as the manifest gives them, mpirun over SSH into the workers, and the suite's parser,
    gate and transport check on the launcher's output. The Slurm cluster is left as it was."""
    from mpijob_model import MpiJobOnNodes

    from gpufleet.spec import load_spec
    from gpufleet.validate.slurm import Sweep
    from gpufleet.validate.suite import run_suite

    _cli, spec_path, state = cluster
    inventory = Inventory.read(state / NAME / "inventory.yml")
    data = yaml.safe_load(spec_path.read_text())
    # The floor of examples/local-slow-node.yaml (0.02 GB/s: a healthy node over the container bridge makes
    # 0.1 and more, a choked one 0.006): local.yaml's 0.05 leaves no room for mpirun's own start over SSH on
    # a busy 2-core host (0.06 measured on 2026-11-27).
    data["validation"].update(
        collectives=["all_reduce"],
        health_checks=False,
        training={"enabled": False},
        min_busbw={"all_reduce": 0.02},
    )
    spec_file = tmp_path / "mpijob.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_file)
    model = MpiJobOnNodes(NAME, inventory, bindir=inventory.nccl_tests_dir,
                          sweep=Sweep.from_spec(spec.validation))  # fmt: skip
    started = time.monotonic()
    try:
        result = run_suite(spec, inventory, model, tmp_path / "report")
    finally:
        left = model.cleanup()
    assert left == [], left
    assert result.passed, result.summary
    (run,) = result.runs
    assert run.command.startswith(
        "mpirun --allow-run-as-root -np 2 --map-by ppr:1:node --bind-to none bash -c"
    )
    assert run.runner == "mpirun (MPIJob launcher)" and run.rc == 0
    # each worker sourced the run's nccl.env (the ConfigMap's, rendered from roles/ethernet) and said so with
    # the node name the worker wrote from the downward API
    for node in (f"{NAME}-compute-0", f"{NAME}-compute-1"):
        assert (
            f"GPUFLEET_NCCL_ENV host={node} fabric=ethernet transport=Socket file=/gpufleet/nccl.env"
            in run.log
        )
    document = json.loads((tmp_path / "report" / "validation-report.json").read_text())
    assert document["context"]["scheduler"] == "kubernetes"
    assert document["context"]["NCCL environment"] == "fabric ethernet, transport Socket (/gpufleet/nccl.env)"
    (job,) = model.jobs
    assert job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] == (
        shlex.split(run.command)
    )
    print(f"\nMPIJob execution model: {result.summary} in {time.monotonic() - started:.1f} s")


# ---- monitoring (issue 20, docs/monitoring.md) ---------------------------------------------------------

# Short durations for the test (the role's variables, set in the inventory as a user would): alerts fire
# within a minute. On the shared 2-core host a spinning rank gets a fraction of a core, so the stand-in reads
# a tenth of a CPU as a fully busy GPU.
MONITORING_VARS = {
    "monitoring_scrape_interval": "5s",
    "monitoring_rules_window": "30s",
    "monitoring_alert_for": {"gpu_idle": "20s", "no_progress": "20s", "no_process": "20s", "throttle": "20s",
                             "node_down": "20s"},
    "monitoring_thresholds": {"idle_below": 0.05, "busy_above": 0.2, "progress_below": 0.01,
                              "heartbeat_stale_seconds": 600, "throttle_above": 0.1},
    "monitoring_simulated_cpus_per_gpu": 0.1,
}  # fmt: skip
SPIN = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    pass\n"


def _wait(what: str, probe: Callable[[], object], timeout: float = 150.0) -> object:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last answer: {last!r}")


def _sh(node: str, command: str) -> list[str]:
    return podman("exec", node, "bash", "-c", command)


def _firing(prom: PrometheusClient, alert: str, job: str) -> list:
    return prom.query(f'ALERTS{{alertname="{alert}",alertstate="firing",jobid="{job}"}}')


def _busy_nodes(prom: PrometheusClient, job: str) -> int:
    return len(prom.query(f'gpufleet:job_node_busy_ratio{{jobid="{job}"}} > 0.2'))


def _submit(ctl: str, nodes: int, command: str) -> str:
    job = _sh(ctl, f"sbatch --parsable -N{nodes} --wrap '{command}'")[0]
    _wait(f"job {job} running", lambda: _sh(ctl, f"squeue -h -j {job} -o %T") == ["RUNNING"], timeout=90)
    return job


def _scenario(prom: PrometheusClient, ctl: str, c0: str, c1: str) -> dict[str, str]:
    """A 2-node busy job, a job that sleeps on a node, a 2-node job with a stopped rank; their job ids."""
    podman("exec", ctl, "python3", "-c", f"open('/shared/spin.py', 'w').write({SPIN!r})")
    # Busy while it runs, on both nodes; idle once it is gone.
    busy = _submit(ctl, 2, "srun python3 /shared/spin.py 300")
    held = _wait(
        "its simulated GPUs", lambda: [s.labels for s in prom.query(f'slurm_job_gpu{{jobid="{busy}"}}')]
    )
    assert sorted((h["node"], h["gpu"], h["simulated"]) for h in held) == [
        (c0, "0", "true"),
        (c1, "0", "true"),
    ]
    _wait(f"job {busy} busy on both nodes", lambda: _busy_nodes(prom, busy) == 2)
    # Busy for several of the test's 5 s scrapes, so its busy ratio stands well above the bound. (util counts
    # every scrape since 62919eb; it took one sample per 15 s step before, and a busy job cancelled ~20 s
    # after it started was once absent from util.)
    time.sleep(30)
    _sh(ctl, f"scancel {busy}")
    _wait("both nodes idle after the job", lambda: len(prom.query("gpufleet:gpu_busy_ratio < 0.05")) == 2)
    assert not prom.query(f'slurm_job_node{{jobid="{busy}"}}')
    # A job that holds a node and sleeps fires the idle alert.
    sleeper = _submit(ctl, 1, "sleep 600")
    idle = _wait("GpuAllocatedIdle firing", lambda: _firing(prom, "GpuAllocatedIdle", sleeper))
    assert idle[0].labels["node"] in (c0, c1), idle  # type: ignore[index]
    _sh(ctl, f"scancel {sleeper}")
    # A stopped rank: one node spins, the other's rank is stopped: busy without progress fires.
    hung = _submit(ctl, 2, "srun python3 /shared/spin.py 600")
    _wait("both ranks busy", lambda: _busy_nodes(prom, hung) == 2)
    _sh(c1, "pkill -STOP -f /shared/spin.py")
    _wait("JobBusyNoProgress firing", lambda: _firing(prom, "JobBusyNoProgress", hung))
    _sh(c1, "pkill -CONT -f /shared/spin.py")
    _sh(ctl, f"scancel {hung}")
    overhead = {
        job: {s.labels["node"]: round(s.values[-1][1], 4) for s in
              prom.query(f'sum by (node) (rate(process_cpu_seconds_total{{job="{job}"}}[1m]))')}
        for job in ("node", "gpufleet-jobs")
    }  # fmt: skip
    print(f"exporter CPU (cores) per node: {overhead}")
    return {"busy": busy, "sleeper": sleeper, "hung": hung}


def test_monitoring_busy_idle_alerts_util(cluster, baked_image: dict) -> None:
    cli, spec, state = cluster
    # Monitoring is on by default (software.monitoring) and the software block is the example's, so the nodes
    # boot the session's baked image, which carries the monitoring packages: configure installs none.
    assert (yaml.safe_load(spec.read_text()).get("software") or {}).get("monitoring", True) is True
    ctl, c0, c1 = f"{NAME}-controller", f"{NAME}-compute-0", f"{NAME}-compute-1"

    inventory_file = state / NAME / "inventory.yml"
    inventory = yaml.safe_load(inventory_file.read_text())
    inventory["all"]["vars"].update(MONITORING_VARS)
    inventory_file.write_text(yaml.safe_dump(inventory, sort_keys=False))
    packages = {node: package_state(node) for node in (ctl, c0, c1)}
    # The test's short windows are inventory variables, which a push carries (the nodes' own play reads the
    # facts up wrote): this test configures by push from here (GPUFLEET_CONFIGURE_FROM=here), where the
    # controller's play also checks that every scrape target answers.
    here = Cli(cli.workdir, state, env={"GPUFLEET_CONFIGURE_FROM": "here"})
    first = here.json("configure", str(spec))
    assert first["ok"] is True and first["install_phase"] == f"skipped: baked image {baked_image['hash']}"
    assert {node: package_state(node) for node in (ctl, c0, c1)} == packages
    checked = task_results(first["artifacts"], "Check that every scrape target answers")
    assert set(checked) == {ctl}, checked
    second = here.json("configure", str(spec))
    assert second["changed"] == 0, second["changed_tasks"]
    # The stand-in's series are labelled simulated; NVIDIA's exporter runs nowhere here.
    page = podman("exec", c0, "python3", "-c", "import urllib.request as u; "
                  "print(u.urlopen('http://127.0.0.1:9342/metrics').read().decode())")  # fmt: skip
    sm = [line for line in page if line.startswith("DCGM_FI_PROF_SM_ACTIVE{")]
    assert sm and all('simulated="true"' in line for line in sm), page[-40:]

    with prometheus_url(Inventory.read(inventory_file)) as url:
        jobs = _scenario(PrometheusClient(url), ctl, c0, c1)

    util = cli.json("util", str(spec), "--hours", "1")
    assert util["simulated"] is True
    assert (
        util["jobs"][jobs["busy"]]["busy_ratio"] > 0.2
        and util["jobs"][jobs["busy"]]["allocated_gpu_hours"] > 0
    )
    # The sleeper is idle but for its start: slurmstepd and the shell use CPU in the job's first seconds,
    # which the stand-in reads as a busy GPU (a tenth of a CPU is a full GPU here, MONITORING_VARS), and util
    # counts every 5 s scrape (62919eb): one scrape of the job's 6-12 reads busy (0.1667 seen in a CI run of
    # e0c85f3). Idle is GpuAllocatedIdle's verdict above; here, at most one scrape's worth.
    assert util["jobs"][jobs["sleeper"]]["busy_ratio"] <= 0.2
    assert set(cli.json("util", str(spec), "--hours", "1", "--job", jobs["busy"])["jobs"]) == {jobs["busy"]}
    print(f"util: {json.dumps(util['jobs'])}")
    SHARED["jobs"] = jobs
    # Issue 38: util says when the idle alert fires here (MONITORING_VARS: a 30 s window, 20 s for it).
    assert util["idle_alert"].startswith(
        "alert GpuAllocatedIdle: an allocated GPU whose SM-active, averaged over 30s, stays below 0.05 for "
        "20s"
    ), util["idle_alert"]
    # Every job gone from Slurm, and util's window ends past the Slurm exporter's next scrape (the series go
    # stale there) and the multiple of the scrape interval util reads: each node is "not allocated" now (it
    # read the last moment any job held GPUs, busy or idle, for the rest of the window; issue 38).
    _wait("every job gone from Slurm", lambda: not _sh(ctl, "squeue -h"))
    gone, interval = time.time(), float(util["resolution_seconds"])
    while util["end"] < gone + 2 * interval:
        time.sleep(max(gone + 2 * interval - time.time(), 0) + 0.5)
        util = cli.json("util", str(spec), "--hours", "1")
    assert {util["nodes"][node]["now"] for node in (c0, c1)} == {"not allocated"}, util["nodes"]
    # Prometheus stopped on the controller: util names the controller and the service, not a tunnel port.
    _sh(ctl, "systemctl stop prometheus")
    try:
        stopped = cli.json("util", str(spec), "--hours", "1", expect=6)["error"]
    finally:
        _sh(ctl, "systemctl start prometheus")
    assert stopped["message"].startswith(f"Prometheus on the controller {ctl} ("), stopped
    assert "port 9090 there) does not answer" in stopped["message"] and "127.0.0.1" not in stopped["message"]
    assert "systemctl status prometheus" in stopped["hint"], stopped


# ---- containers (issue 22, docs/containers.md) ---------------------------------------------------------

MARKER = "/etc/gpufleet-test-image"
# Left out of the test's image: what no job here reads (documentation, locales, apt's lists and caches, the
# compilers and headers the bake built with, the monitoring binaries), so that each node unpacks less for each
# job step (enroot unpacks the image per step: about a minute per step for the whole node image, on this
# loaded 2-core host), and the node's Slurm spool, which a user's image does not carry: enroot's
# 50-slurm-pmi.sh hook mounts slurmd's pmix.<job>.<step> folder at the same path inside, and could not create
# it below the spool folder the node image has (owned by the slurm user there: "Permission denied", seen
# 2026-11-24).
EXCLUDED = [
    "usr/share/doc",
    "usr/share/locale",
    "usr/share/man",
    "var/lib/apt/lists",
    "var/cache",
    "var/lib/slurm",
    "usr/lib/gcc",
    "usr/libexec/gcc",
    "usr/include",
    "usr/bin/prometheus*",
    "opt/gpufleet/torch/lib/python3*/site-packages/torch/include",
]


def export_rootfs(base: str, rootfs: Path) -> None:
    """``podman export`` of a container of ``base`` into ``rootfs``, less ``EXCLUDED``."""
    rootfs.mkdir(parents=True)
    container = podman("create", base, "true")[-1]
    try:
        export = subprocess.Popen(
            ["podman", "export", container], stdout=subprocess.PIPE, env=local_podman().env
        )
        excluded = [f"--exclude={path}" for path in EXCLUDED]
        subprocess.run(["tar", "-C", str(rootfs), "-x", *excluded], stdin=export.stdout, check=True)
        assert export.wait() == 0
    finally:
        podman("rm", "-f", container)


def squash(rootfs: Path, out: Path, *excluded: str) -> None:
    """``mksquashfs`` of ``rootfs`` with a marker file naming the image (its file name's stem)."""
    (rootfs / MARKER.lstrip("/")).write_text(f"{out.stem}\n")
    leave_out = ["-wildcards", "-e", *excluded] if excluded else []
    subprocess.run(
        ["mksquashfs", str(rootfs), str(out), "-noappend", "-comp", "lz4", "-quiet", *leave_out],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory, baked_image: dict) -> tuple[Path, Path]:
    """A job image made on the host from the baked node image (podman export + mksquashfs, the recipe of
    docs/containers.md), and the same image without Open MPI's libraries (and without torch: no training
    runs in it), in which the CPU benchmark cannot start."""
    if shutil.which("mksquashfs") is None:
        pytest.fail("the containers test makes squashfs images on the host: apt-get install squashfs-tools")
    workdir = tmp_path_factory.mktemp("images")
    good, bad, rootfs = workdir / "job.sqsh", workdir / "no-mpi.sqsh", workdir / "rootfs"
    export_rootfs(baked_image["name"], rootfs)
    squash(rootfs, good)
    for library in rootfs.glob("usr/lib/x86_64-linux-gnu/libmpi.so*"):
        library.unlink()
    squash(rootfs, bad, "opt/gpufleet/torch")
    shutil.rmtree(rootfs)
    return good, bad


def test_jobs_and_validation_run_inside_the_image(cluster, images: tuple[Path, Path]) -> None:
    """The spec now names a container image: ``up`` writes it into the inventory, ``configure`` stages it
    once on the shared filesystem, jobs run in it across both nodes, and validation runs inside it."""
    cli, spec, state = cluster
    good, bad = images
    controller, computes = f"{NAME}-controller", [f"{NAME}-compute-0", f"{NAME}-compute-1"]
    data = yaml.safe_load(spec.read_text())
    data["software"]["container_image"] = str(good)
    in_image = spec.with_name("containers.yaml")
    in_image.write_text(yaml.safe_dump(data))
    # Another file with the cluster's name (issue 38): refused until it is named the cluster's spec, and then
    # the image is the one change, made in place (the nodes stay as they are).
    refused = cli.json("up", str(in_image), expect=7)["error"]
    assert f"software.container_image: (none) -> {good}" in refused["message"], refused
    replaced = cli.json("up", str(in_image), "--replace")
    assert replaced["applied"] == [f"software.container_image: (none) -> {good}"], replaced
    configured = cli.json("configure", str(in_image))
    assert configured["ok"] is True

    # Staged once on the shared filesystem; every node sees the same file.
    staged = "/shared/gpufleet/images/job.sqsh"
    sizes = {node: podman("exec", node, "stat", "-c", "%s", staged) for node in [controller, *computes]}
    assert len({tuple(size) for size in sizes.values()}) == 1, sizes
    assert podman("exec", computes[0], "enroot", "version") == ["4.1.2"]

    # srun --container-image across both compute nodes: each task is inside the image (its marker file,
    # absent on the nodes) and sees the node's NCCL environment (mounted from /etc/gpufleet).
    assert podman("exec", computes[0], "test", "!", "-e", MARKER) == []
    lines = podman(
        "exec", controller, "srun", "-N", "2", f"--nodelist={','.join(computes)}",
        f"--container-image={staged}", "--no-container-entrypoint", "bash", "-c",
        f'. /etc/gpufleet/nccl.env; echo "$(hostname -s) $(cat {MARKER}) $GPUFLEET_FABRIC"',
    )  # fmt: skip
    assert sorted(line for line in lines if line.startswith(NAME)) == [
        f"{node} job ethernet" for node in computes
    ]

    # The validation inside the image: a collective and the training check, with their report (one collective:
    # each job step unpacks the image on every node, and the main cycle ran both on the nodes themselves).
    out = state.parent / "in-image"
    one = yaml.safe_load(in_image.read_text())
    one["validation"]["collectives"] = ["all_reduce"]
    one_spec = spec.with_name("in-image.yaml")
    one_spec.write_text(yaml.safe_dump(one))
    report = cli.json("validate", str(one_spec), "--out", str(out))
    assert report["passed"] is True, json.dumps(report, indent=1)[:4000]
    assert report["context"]["ran inside"] == staged
    log = (out / "logs" / "all_reduce.log").read_text()
    assert f"--container-image={staged}" in log.splitlines()[0], log[:500]
    assert report["training"]["passed"] is True, json.dumps(report["training"], indent=1)[:3000]
    assert (out / "validation-report.md").exists()

    # An image without what the collectives need fails the gate, and the report says why. Validation runs
    # in the image the cluster staged (the inventory's, written at up), so the bad image takes its place on
    # the shared filesystem; one short collective is enough for the verdict.
    podman("cp", str(bad), f"{controller}:{staged}")
    broken = yaml.safe_load(in_image.read_text())
    broken["validation"].update(
        collectives=["all_reduce"], max_bytes="1M", gate_min_bytes="1M", find_bad_nodes=False
    )
    broken["validation"]["training"]["enabled"] = False
    broken_spec = spec.with_name("broken.yaml")
    broken_spec.write_text(yaml.safe_dump(broken))
    failed = cli.json("validate", str(broken_spec), "--out", str(state.parent / "broken"), expect=1)
    assert failed["passed"] is False
    reasons = json.dumps(failed["tests"])
    assert "libmpi.so" in reasons, reasons[:3000]
    # The cause first (issue 38): the loader's line, then srun's bookkeeping.
    first = failed["tests"][0]["failures"][0]
    assert first.startswith("/opt/gpufleet/mpi-perf/bin/all_reduce_perf: error"), first

    # A registry image that cannot be imported (issue 38): the stage step of roles/containers, as configure
    # runs it, names the reference and enroot's own error (it said "non-zero return code").
    reference = "nvcr.io#nvidia/gpufleet-no-such-image:1"
    play = state.parent / "stage.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": controller, "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "containers", "tasks_from": "stage.yml"},
                   "vars": {"containers_image": reference}}],
    }]))  # fmt: skip
    playbook = str(Path(GPUFLEET).parent / "ansible-playbook")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    env["ANSIBLE_ROLES_PATH"] = str(ROOT / "roles")
    staged = subprocess.run(
        [playbook, "-i", str(state / NAME / "inventory.yml"), str(play)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert staged.returncode != 0, staged.stdout[-3000:]
    said = " ".join(staged.stdout.split())
    assert f"enroot could not import software.container_image {reference}" in said, said[-3000:]
    assert "[ERROR]" in said or "curl" in said, said[-3000:]  # enroot's own words
    print(f"enroot's import failure as configure reports it: {said[said.find('enroot could not') :][:600]}")


# ---- down (the last test: the module's cluster is gone after it) ----------------------------------------


def test_down_reports_utilization_and_leaves_nothing(cluster) -> None:
    cli, spec, state = cluster
    down = cli.json("down", str(spec))
    assert down["leftovers"] == []
    assert any(item.startswith(f"network gpufleet-{NAME}") for item in down["removed"])
    assert leftovers() == {"containers": [], "networks": [], "volumes": []}
    assert not (state / NAME).exists()
    # The utilization report of the cluster's life, written before its Prometheus went away.
    assert down["utilization"]["available"] is True, down["utilization"]
    report = Path(down["utilization"]["dir"])
    busy = str(SHARED["jobs"]["busy"])  # type: ignore[index]
    assert json.loads((report / "utilization.json").read_text())["jobs"][busy]["busy_ratio"] > 0.2
    assert (report / "utilization.png").stat().st_size > 1000

    # down on a cluster that is already gone is harmless.
    assert cli.json("down", str(spec))["removed"] == []
