"""gpufleet configure for nodes that configure themselves (configure.boot_wait): it waits, reads, names.

A stand-in controller answers the commands the wait sends (sinfo's registrations, the one listing of the
results folder, scontrol's drain) from a simulated cluster whose nodes boot, write their result and
register at given times on a fake clock; a node that never boots does not answer SSH."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from factories import make_host, make_inventory
from gpufleet.configure import boot_wait, node_result
from gpufleet.errors import ConfigureError, Interrupted, ValidationRunError
from gpufleet.inventory.model import Host, Inventory
from gpufleet.spec.model import Role

IMAGE = "ab" * 32
RESULTS = "/shared/.gpufleet/configure"


def inventory(compute: int) -> Inventory:
    hosts = [make_host("head", [Role.CONTROLLER], ip="10.0.0.1", cpus=2)]
    hosts += [make_host(f"n{i}", ip=f"10.0.1.{i}", cpus=4, memory_mb=2048) for i in range(1, compute + 1)]
    return make_inventory(hosts, cluster="c", baked_image_hash=IMAGE, boot_configure=True)


def result(host: str, *, failed: tuple[str, str] | None = None, run: str = "boot") -> dict[str, Any]:
    """A node's result, in the shape gpufleet.node.boot_configure writes (tests/node/test_boot_configure.py
    reads a real one back through node_result)."""
    tasks = [
        {"task": "munge : Install the cluster's munge key", "status": "ok"},
        {"task": "slurm : Start slurmd", "status": "changed"},
    ]
    if failed:
        tasks.append({"task": failed[0], "status": "failed"})
    return {
        "version": 1,
        "host": host,
        "run": run,
        "image": IMAGE,
        "started": 1.0,
        "finished": 2.0,
        "ok": failed is None,
        "rc": 2 if failed else 0,
        "tasks": tasks,
        "failed": {"task": failed[0], "message": failed[1]} if failed else None,
        "stats": {"changed": 1},
    }


@dataclass
class Node:
    result_at: float | None = 10.0  # when its result appears (None: never: it did not boot)
    register_at: float | None = 12.0  # when its slurmd registers (None: never)
    failed: tuple[str, str] | None = None
    run: str = "boot"
    unreadable: bool = False
    # from when a started, not finished result (the unit's ExecStartPre) is there until the result is
    started_at: float | None = None


@dataclass
class FakeCluster:
    """The controller runs the wait's real listing script (this machine's python3) against a real folder
    that stands for the shared filesystem's results folder, where each node's file appears, is replaced
    (only when its content changes, as a node's atomic write does) or is removed as the node says."""

    nodes: dict[str, Node]
    now: float = 0.0
    commands: list[str] = field(default_factory=list)
    drains: dict[str, str] = field(default_factory=dict)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="boot-wait-")))
    listed: list[str] = field(default_factory=list)  # every result line the listings printed

    def write_results(self) -> Path:
        folder = self.root / "results"
        folder.mkdir(exist_ok=True)
        for name, node in self.nodes.items():
            if node.result_at is not None and node.result_at <= self.now:
                text = (
                    "{not json"
                    if node.unreadable
                    else json.dumps(result(name, failed=node.failed, run=node.run))
                )
            elif node.started_at is not None and node.started_at <= self.now:
                text = json.dumps({**result(name, run=node.run), "finished": None, "ok": False, "rc": None})
            else:
                (folder / f"{name}.json").unlink(missing_ok=True)
                continue
            path = folder / f"{name}.json"
            if not path.exists() or path.read_text() != text:
                temporary = folder / f".{name}.tmp"
                temporary.write_text(text)
                temporary.replace(path)
        return folder

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    # the controller
    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        self.commands.append(command)
        if "configure-run" in command:  # the controller is a node that configures itself too
            return self.node("head").run(command, timeout)
        argv = shlex.split(command)
        if argv[0] == "sinfo":
            lines = []
            for name, node in self.nodes.items():
                if name != "head" and node.register_at is not None and node.register_at <= self.now:
                    reason = self.drains.get(name, "gpufleet: not validated")
                    lines.append(f"{name}|drained|{reason}")
            return 0, "\n".join(lines) + "\n", ""
        if argv[:2] == ["python3", "-c"]:
            assert argv[3] == RESULTS and argv[4].startswith("~/.cache/gpufleet/wait-"), argv[3:]
            state = str(self.root / argv[4].removeprefix("~/"))
            # (the hold, argv[6], is real time inside the script: this cluster's time is its fake clock)
            done = subprocess.run(
                [sys.executable, "-c", argv[2], str(self.write_results()), state, argv[5], "0"],
                capture_output=True,
                text=True,
                check=True,
            )
            self.listed += [
                line for line in done.stdout.splitlines() if line.startswith(boot_wait.RESULT_MARK)
            ]
            return 0, done.stdout, done.stderr
        if argv[:3] == ["rm", "-f", "--"]:  # the wait's end: its state file
            return 0, "", ""
        if argv[:2] == ["scontrol", "update"]:
            node = argv[2].removeprefix("nodename=")
            assert argv[3] == "state=drain"
            self.drains[node] = argv[4].removeprefix("reason=")
            return 0, "", ""
        raise AssertionError(f"unexpected command {command}")

    def node(self, name: str) -> NodeShell:
        return NodeShell(self, name)


@dataclass
class NodeShell:
    cluster: FakeCluster
    name: str

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        node = self.cluster.nodes[self.name]
        if node.result_at is None:
            raise ValidationRunError(f"cannot reach {self.name} (10.0.1.9) over SSH: Connection timed out")
        if "configure-run" in command:  # the re-run's trigger: a new run id, the unit started again
            assert command == boot_wait.trigger_command(command.split("'%s\\n' ")[1].split(" ")[0])
            node.run = command.split("'%s\\n' ")[1].split(" ")[0]
            node.result_at = self.cluster.now + 10
            return 0, "", ""
        assert command == boot_wait.probe_command()
        return 0, "ActiveState=failed\nResult=exit-code\nExecMainStatus=1\n", ""


def wait(
    cluster: FakeCluster, inv: Inventory, *, run: str | None = None, deadline: float = 300
) -> boot_wait.BootReport:
    view = boot_wait.SlurmView(
        controller=cluster, node_executor=cluster.node, results_dir=RESULTS, nodes=[h.name for h in inv.hosts]
    )
    return boot_wait.wait_for_nodes(
        inv, view, run=run, deadline_s=deadline, poll_s=5, clock=cluster.clock, sleep=cluster.sleep
    )


def test_every_node_configured_and_registered_ends_the_wait_without_a_drain() -> None:
    inv = inventory(3)
    cluster = FakeCluster({h.name: Node() for h in inv.hosts})
    report = wait(cluster, inv)
    assert report.ok and sorted(report.configured) == ["head", "n1", "n2", "n3"]
    assert cluster.now == 15.0  # results at 10 s, registrations at 12 s, rounds every 5 s
    assert cluster.drains == {}
    assert boot_wait.result_summary(report.results)[0] == 4


@pytest.mark.parametrize("compute", [2, 64])
def test_each_round_is_two_commands_on_the_controller_whatever_the_node_count(compute: int) -> None:
    inv = inventory(compute)
    cluster = FakeCluster({h.name: Node() for h in inv.hosts})
    assert wait(cluster, inv).ok
    rounds = int(cluster.now / 5) + 1
    assert len(cluster.commands) == 2 * rounds == 8


def test_a_node_whose_play_failed_is_named_with_its_task_and_stays_drained_with_it_as_reason() -> None:
    inv = inventory(2)
    nodes = {h.name: Node() for h in inv.hosts}
    nodes["n2"] = Node(
        failed=("nccl_env : Write the NCCL environment", "Destination /etc/gpufleet not writable")
    )
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv)
    assert not report.ok and report.missing == {}
    assert report.failed["n2"].task == "nccl_env : Write the NCCL environment"
    assert report.lines() == [
        "n2: play failed at 'nccl_env : Write the NCCL environment': Destination /etc/gpufleet not writable"
    ]
    # Drained again, the failed task its reason: validate will not release it until it is repaired.
    assert cluster.drains == {"n2": "gpufleet: configure failed: nccl_env : Write the NCCL environment"}
    assert report.drained == ["n2"] and sorted(report.configured) == ["head", "n1"]
    assert cluster.now == 15.0  # a failed node does not hold the wait for its registration


def test_a_node_that_never_boots_is_named_after_the_deadline_with_what_was_seen() -> None:
    inv = inventory(3)
    nodes = {h.name: Node() for h in inv.hosts}
    nodes["n3"] = Node(result_at=None, register_at=None)
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv, deadline=120)
    assert cluster.now == 120.0  # the whole deadline, then named
    assert list(report.missing) == ["n3"]
    seen = report.missing["n3"]
    assert seen.startswith(
        "no result; not registered (slurmctld does not know it (its slurmd never registered))"
    )
    assert "does not answer SSH (cannot reach n3" in seen and "it did not boot" in seen
    assert cluster.drains == {}  # nothing to drain: slurmctld does not know it
    assert sorted(report.configured) == ["head", "n1", "n2"]


def test_a_node_whose_play_passed_but_never_registered_is_named_with_its_unit() -> None:
    inv = inventory(2)
    nodes = {h.name: Node() for h in inv.hosts}
    nodes["n1"] = Node(register_at=None)
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv, deadline=60)
    assert report.missing["n1"].startswith("its play passed, but slurmctld does not know it")
    assert "ActiveState=failed Result=exit-code" in report.missing["n1"]


def test_a_rerun_waits_for_its_own_run_and_names_a_node_that_kept_the_old_one() -> None:
    inv = inventory(2)
    nodes = {h.name: Node(run="r-7") for h in inv.hosts}
    nodes["n2"] = Node(run="boot")  # its unit was not started again
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv, run="r-7", deadline=60)
    assert report.missing["n2"].startswith("its result is of run 'boot' (waited for 'r-7'); registered")


def test_each_result_crosses_once_per_change_not_once_per_round() -> None:
    """The listing sends a result when it changed since the last listing that arrived: over a wait of 17
    rounds, 65 nodes' results (one of them started, then finished) are listed 66 times in all; listing
    every result every round (the wait before) sent 537 result lines here, and grows with N times rounds."""
    inv = inventory(64)
    nodes = {h.name: Node(result_at=10.0 + i, register_at=12.0 + i) for i, h in enumerate(inv.hosts)}
    nodes["n7"] = Node(started_at=0.0, result_at=30.0, register_at=31.0)
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv)
    assert report.ok and len(report.configured) == 65
    rounds = int(cluster.now / 5) + 1
    assert rounds == 17
    assert sorted(line.split()[1] for line in cluster.listed) == sorted([*nodes, "n7"])


def test_a_listing_whose_output_never_arrived_is_listed_again_from_the_last_that_did() -> None:
    """The listing's state on the controller moves on only when the wait acknowledges a round (it sends the
    last token it read): a round lost on the way (SSH dropped) loses no result."""
    inv = inventory(3)
    nodes = {h.name: Node(result_at=5.0 * i, register_at=5.0 * i + 1) for i, h in enumerate(inv.hosts)}
    cluster = FakeCluster(nodes)
    lost: list[str] = []

    class Dropping:
        def run(self, command: str, timeout: float) -> tuple[int, str, str]:
            rc, out, err = cluster.run(command, timeout)
            if command.startswith("python3 -c") and boot_wait.RESULT_MARK in out and not lost:
                lost.append(out)  # the controller listed it, the wait never read it
                return 255, "", "Connection reset by peer"
            return rc, out, err

    view = boot_wait.SlurmView(
        controller=Dropping(),
        node_executor=cluster.node,
        results_dir=RESULTS,
        nodes=[h.name for h in inv.hosts],
    )
    report = boot_wait.wait_for_nodes(
        inv, view, run=None, deadline_s=120, clock=cluster.clock, sleep=cluster.sleep
    )
    assert lost and report.ok and sorted(report.configured) == ["head", "n1", "n2", "n3"]


def test_the_listing_holds_until_a_result_changes_and_answers_at_once_when_one_does(tmp_path: Path) -> None:
    """The long poll: with nothing new the listing answers after its hold, empty; a result written during
    the hold is answered within about a second of landing, not at the hold's end."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "n1.json").write_text(json.dumps(result("n1")))
    state = str(tmp_path / "state.json")

    def listing(ack: str, hold: float) -> tuple[boot_wait.Listing, float]:
        argv = shlex.split(boot_wait.listing_command(str(folder), state, ack, hold))
        started = time.monotonic()
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True)
        return boot_wait.read_listing(done.stdout), time.monotonic() - started

    first, _ = listing("", 30)  # nothing acknowledged: everything, at once
    assert list(first.changed) == ["n1"] and first.token
    quiet, took = listing(first.token, 1.5)
    assert quiet.changed == {} and quiet.gone == [] and took >= 1.5
    writer = threading.Timer(0.5, lambda: (folder / "n2.json").write_text(json.dumps(result("n2"))))
    writer.start()
    news, took = listing(quiet.token or "", 30)
    writer.join()
    assert list(news.changed) == ["n2"] and took < 15, took  # answered on the change, not after the hold


def test_a_result_that_cannot_be_read_is_read_again_next_round(tmp_path: Path) -> None:
    """A file the controller could not read or parse (a read error, a half-written copy) is listed as
    unreadable and read again the next round, changed or not; once it reads, it is listed as the result."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "n1.json").write_text("{not json")
    state = str(tmp_path / "state.json")

    def listing(ack: str) -> boot_wait.Listing:
        argv = shlex.split(boot_wait.listing_command(str(folder), state, ack, 0))
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True)
        return boot_wait.read_listing(done.stdout)

    first = listing("")
    assert "unreadable" in first.changed["n1"]
    again = listing(first.token or "")
    assert "unreadable" in again.changed["n1"]  # the same file, listed again
    (folder / "n1.json").write_text(json.dumps(result("n1")))
    fixed = listing(again.token or "")
    assert json.loads(fixed.changed["n1"])["host"] == "n1"
    assert listing(fixed.token or "").changed == {}


def test_the_controller_lost_mid_wait_is_tried_again_then_named() -> None:
    """SSH to the controller failing for a round (a dropped connection) costs that round only; failing
    FAILED_ROUNDS times in a row ends the wait naming what the controller's SSH said."""
    inv = inventory(2)
    cluster = FakeCluster({h.name: Node() for h in inv.hosts})
    failing = {"left": 2}

    class Flaky:
        def run(self, command: str, timeout: float) -> tuple[int, str, str]:
            if failing["left"] > 0:
                failing["left"] -= 1
                raise ValidationRunError("cannot reach head (10.0.0.1) over SSH: Connection reset")
            return cluster.run(command, timeout)

    view = boot_wait.SlurmView(
        controller=Flaky(), node_executor=cluster.node, results_dir=RESULTS, nodes=[h.name for h in inv.hosts]
    )
    report = boot_wait.wait_for_nodes(
        inv, view, run=None, deadline_s=60, clock=cluster.clock, sleep=cluster.sleep
    )
    assert report.ok and "Connection reset" in str(view.last_error)

    failing["left"] = 100
    view = boot_wait.SlurmView(
        controller=Flaky(), node_executor=cluster.node, results_dir=RESULTS, nodes=[h.name for h in inv.hosts]
    )
    with pytest.raises(ConfigureError) as lost:
        boot_wait.wait_for_nodes(
            inv, view, run=None, deadline_s=600, clock=cluster.clock, sleep=cluster.sleep
        )
    assert "lost the controller" in lost.value.message and "Connection reset" in lost.value.message
    assert "5 times in a row" in lost.value.message


def test_a_signal_during_the_wait_is_never_taken_for_a_lost_controller() -> None:
    """gpufleet's signal handler raises Interrupted (a GpufleetError) in the main thread, wherever it is: in
    the middle of a command on the controller it must end the wait at once, not count as a failed round (CI
    of stop 45: SIGINT during configure's wait was swallowed, and configure went on waiting)."""
    inv = inventory(2)
    cluster = FakeCluster({h.name: Node(result_at=300.0) for h in inv.hosts})
    calls = {"n": 0}

    class Signalled:
        def run(self, command: str, timeout: float) -> tuple[int, str, str]:
            calls["n"] += 1
            if calls["n"] == 3:
                raise Interrupted("SIGINT")
            return cluster.run(command, timeout)

    view = boot_wait.SlurmView(
        controller=Signalled(),
        node_executor=cluster.node,
        results_dir=RESULTS,
        nodes=[h.name for h in inv.hosts],
    )
    with pytest.raises(Interrupted):
        boot_wait.wait_for_nodes(
            inv, view, run=None, deadline_s=600, clock=cluster.clock, sleep=cluster.sleep
        )
    assert calls["n"] == 3


def test_a_started_result_is_waited_for_and_a_play_that_never_ends_is_named_as_running() -> None:
    """The unit's ExecStartPre replaces the last boot's result with a started one (a node stopped mid-play
    wrote "stopped" as its result, and a re-run of up starts it again): the wait reads it as not done yet,
    and names a play that is still running at the deadline as such, not as a node without a result."""
    inv = inventory(2)
    nodes = {h.name: Node() for h in inv.hosts}
    nodes["n1"] = Node(started_at=0.0, result_at=40.0, register_at=41.0)
    nodes["n2"] = Node(started_at=0.0, result_at=None, register_at=None)
    cluster = FakeCluster(nodes)
    report = wait(cluster, inv, deadline=60)
    assert "n1" in report.configured and "n1" not in report.missing
    assert cluster.now == 60.0
    running = "its play (run 'boot') started at 00:00:01 UTC and had not finished"
    assert report.missing["n2"].startswith(running), report.missing["n2"]
    assert cluster.drains == {}


def test_an_unreadable_result_is_a_finding_about_its_node() -> None:
    inv = inventory(1)
    nodes = {h.name: Node() for h in inv.hosts}
    nodes["n1"] = Node(unreadable=True)
    report = wait(FakeCluster(nodes), inv, deadline=30)
    assert report.missing["n1"].startswith("its result is not JSON")


def test_the_typed_reader_refuses_a_result_of_another_shape() -> None:
    said = node_result.parse(json.dumps({**result("n1"), "tasks": [{"task": "x", "status": "weird"}]}))
    assert isinstance(said, str) and said.startswith("its result does not read as one: tasks.0.status")
    assert isinstance(node_result.parse(json.dumps(result("n1"))), node_result.NodeResult)


@pytest.mark.parametrize(
    ("switch", "phases", "expect"),
    [
        (None, {"up": {"at": "2026-11-27T10:00:00+00:00"}}, ("wait", False)),  # right after up
        (
            None,
            {"up": {"at": "2026-11-27T10:00:00+00:00"}, "configure": {"at": "2026-11-27T10:05:00+00:00"}},
            ("wait", True),
        ),  # a running cluster: every unit started again
        (
            None,
            {"up": {"at": "2026-11-27T11:00:00+00:00"}, "configure": {"at": "2026-11-27T10:05:00+00:00"}},
            ("wait", False),
        ),  # up again since (nodes added): their boot's results
        ("here", {}, ("push", None)),  # push stays when asked for
        ("head", {}, ("push", None)),
        ("file-image", {}, ("push", None)),  # a squashfs file on this machine: only a push copies it
    ],
)
def test_gpufleet_configure_waits_for_nodes_that_configure_themselves_and_pushes_when_asked(
    switch: str | None,
    phases: dict[str, Any],
    expect: tuple[str, bool | None],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib
    from pathlib import Path

    from gpufleet import pipeline
    from gpufleet.bake import baker
    from gpufleet.configure import relay, runner
    from gpufleet.configure.runner import PlayResult
    from gpufleet.progress import SilentReporter
    from gpufleet.spec import load_spec

    if switch in (None, "file-image"):
        monkeypatch.delenv(relay.SWITCH, raising=False)
    else:
        monkeypatch.setenv(relay.SWITCH, switch)
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "local.yaml")
    if switch == "file-image":
        software = spec.software.model_copy(update={"container_image": "/srv/images/job.sqsh"})
        spec = spec.model_copy(update={"software": software})
    called: list[tuple[str, bool | None]] = []

    class State:
        logs_dir = tmp_path / "logs"
        inventory_file = tmp_path / "inventory.yml"

        def load(self) -> dict[str, Any]:
            return {"phases": phases}

        def ensure_munge_key(self) -> Path:
            return tmp_path / "munge.key"

        def mark(self, *args: object, **kwargs: object) -> None:
            pass

    monkeypatch.setattr(pipeline, "load_inventory", lambda spec, command=None: (State(), inventory(2)))
    monkeypatch.setattr(pipeline, "tracked", lambda state, phase: contextlib.nullcontext())
    monkeypatch.setattr(baker, "baked_and_current", lambda spec, extra: IMAGE)

    def at_boot(inv: Inventory, reporter: object, *, rerun: bool) -> PlayResult:
        called.append(("wait", rerun))
        return PlayResult(ok=True, changed=0)

    def push(*args: object, **kwargs: object) -> PlayResult:
        called.append(("push", None))
        return PlayResult(ok=True, changed=0)

    monkeypatch.setattr(boot_wait, "configure_at_boot", at_boot)
    monkeypatch.setattr(runner, "run_playbook", push)
    monkeypatch.setattr(relay, "configure_on_head", lambda *a, **k: push())
    result = pipeline.configure(spec, SilentReporter())
    assert called == [expect]
    assert result.install_phase == f"skipped: baked image {IMAGE}"


def test_a_rerun_starts_every_nodes_unit_with_a_new_run_id_and_fails_naming_the_failed_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpufleet.errors import ConfigureError
    from gpufleet.progress import SilentReporter

    inv = inventory(2).model_copy(update={"filesystem": {"kind": "volume", "mount_point": "/shared"}})
    nodes = {h.name: Node(run="boot", result_at=0.0, register_at=0.0) for h in inv.hosts}
    nodes["n2"] = Node(
        run="boot", result_at=0.0, register_at=0.0, failed=("slurm : Start slurmd", "timed out")
    )
    cluster = FakeCluster(nodes)

    def executor(inventory: Inventory, host: Host) -> Any:
        return cluster if host.name == "head" else cluster.node(host.name)

    monkeypatch.setattr(boot_wait, "SshExecutor", executor)
    monkeypatch.setattr(boot_wait.time, "sleep", cluster.sleep)
    monkeypatch.setattr(boot_wait.time, "monotonic", cluster.clock)
    triggered: list[str] = []
    original = NodeShell.run

    def run(self: NodeShell, command: str, timeout: float) -> tuple[int, str, str]:
        if "configure-run" in command:
            triggered.append(self.name)
        return original(self, command, timeout)

    monkeypatch.setattr(NodeShell, "run", run)
    with pytest.raises(ConfigureError) as failed:
        boot_wait.configure_at_boot(inv, SilentReporter(), rerun=True, deadline_s=60)
    assert sorted(triggered) == ["head", "n1", "n2"]
    assert "n2: play failed at 'slurm : Start slurmd': timed out" in failed.value.message
    assert {node.run for node in nodes.values()} == {nodes["n1"].run}  # one run id for all
    assert nodes["n1"].run.startswith("r-") and cluster.now == 10.0  # results 10 s after the trigger
    assert cluster.drains == {"n2": "gpufleet: configure failed: slurm : Start slurmd"}


def test_the_image_s_user_drains_and_starts_the_unit_through_sudo() -> None:
    """On the clouds gpufleet logs in as the image's user (ubuntu): scontrol's node update and the unit's
    restart need root."""
    assert boot_wait.as_root("scontrol update nodename=n1 state=drain reason=x", "root").startswith(
        "scontrol"
    )
    said = boot_wait.as_root(boot_wait.trigger_command("r-1"), "ubuntu")
    assert shlex.split(said)[:4] == ["sudo", "-n", "sh", "-c"]
    assert shlex.split(said)[4] == boot_wait.trigger_command("r-1")
    inv = inventory(1)
    cluster = FakeCluster({h.name: Node(failed=("x : y", "z"), register_at=0.0) for h in inv.hosts})
    sudo: list[str] = []

    class Sudo:
        def run(self, command: str, timeout: float) -> tuple[int, str, str]:
            if command.startswith("sudo -n"):
                sudo.append(command)
                command = shlex.split(command)[4]
            return cluster.run(command, timeout)

    view = boot_wait.SlurmView(
        controller=Sudo(),
        node_executor=cluster.node,
        results_dir=RESULTS,
        nodes=["head", "n1"],
        user="ubuntu",
    )
    boot_wait.wait_for_nodes(inv, view, run=None, deadline_s=30, clock=cluster.clock, sleep=cluster.sleep)
    assert cluster.drains == {"n1": "gpufleet: configure failed: x : y"} and len(sudo) == 1
