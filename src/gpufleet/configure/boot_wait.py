"""``gpufleet configure`` for nodes that configure themselves: wait, read, check once, name (issue 34 item 5).

Each node booted from the baked image runs the configure phase on itself (``gpufleet.node.boot_configure``)
and writes its result to the shared filesystem; each compute node's slurmd registers with slurmctld,
drained "gpufleet: not validated" (docs/slurm.md). ``gpufleet configure`` then pushes nothing. It polls,
until every node has a result for this run and every compute node whose play passed has registered, or
the deadline passes, with two commands on the controller per round whatever the node count:

- ``sinfo -N -h -o '%N|%T|%E'``: the registrations, read by roles/slurm's own ``slurm_registrations``;
- one listing of ``<mount point>/.gpufleet/configure/*.json``: the results that changed since the last
  round's listing (``listing_command``: the head stats every file and reads only the changed ones; each
  result crosses SSH and is parsed, ``node_result``, once per change, not once per round).

The cross-node checks the push play makes are made here, once: a compute node that registered has a munge
key slurmctld's decodes (slurmd's registration is munge-authenticated), a result read from the controller's
view of the shared filesystem was written by that node into the same filesystem, and every result names the
cluster's image. Then it names every node whose play failed (a registered one is drained again with the
failed task as its reason, so it stays out until it is repaired and validated) and every node that never
showed up, with what was seen of it: no result and not registered (and what the node says of its unit, when
it answers SSH: ``probe``), a result but no registration, a result of another run.

A cluster without a shared filesystem has no listing: each node's ``RESULT_FILE`` is read over SSH
(``PerNodeResults``), N calls per round (docs/boot-configure.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shlex
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import Protocol

from gpufleet.configure.node_result import FailedTask, NodeResult, parse
from gpufleet.configure.remote import SshExecutor
from gpufleet.configure.runner import PlayResult
from gpufleet.errors import ConfigureError, GpufleetError, Interrupted, ValidationRunError
from gpufleet.inventory.model import Host, Inventory
from gpufleet.inventory.node_facts import RESULT_FILE, shared_results_dir
from gpufleet.paths import project_root
from gpufleet.progress import Reporter

RESULT_MARK = "GPUFLEET_RESULT "
UNIT = "gpufleet-node-configure.service"
# slurmctld's reason field: what scontrol keeps of a drain's reason (gpufleet's own words first).
REASON_PREFIX = "gpufleet: configure failed: "
REASON_LIMIT = 200


class Executor(Protocol):
    """Runs a shell command on a node (``configure.remote.SshExecutor``)."""

    def run(self, command: str, timeout: float) -> tuple[int, str, str]: ...


def _slurm_filters() -> ModuleType:
    """roles/slurm's filter plugins (standard library only): the one reading of sinfo's registrations."""
    path = project_root() / "roles" / "slurm" / "filter_plugins" / "slurm.py"
    spec = importlib.util.spec_from_file_location("gpufleet_slurm_filters", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SINFO = "sinfo --noheader --Node --format='%N|%T|%E'"


TOKEN_MARK = "GPUFLEET_LISTED "
GONE_MARK = "GPUFLEET_GONE "

# The listing's script (the controller's python3, 3.6 or later: every image gpufleet boots has one). Each
# round it stats every result file and reads only those whose (inode, mtime, size) differ from what the
# round ``ack`` saw: the signatures of each listing are kept in a state file of the SSH user's on the
# controller, under a token the wait sends back with its next round (a round whose output never reached the
# wait is listed again, as its token is never acknowledged). So a round costs the head N stats and the
# runner a line for each result that changed, not every node's whole result (about 12 KB each) every 5 s.
_LISTING = """\
import json, os, pathlib, sys, time, uuid
folder, state, ack = pathlib.Path(sys.argv[1]), pathlib.Path(os.path.expanduser(sys.argv[2])), sys.argv[3]
hold = float(sys.argv[4])


def signature(path):
    # open(), not stat(): an NFS client asks the server for a file's attributes when it is opened
    # (close-to-open), where stat() may answer from its attribute cache for up to a minute (nfs(5)).
    fd = os.open(str(path), os.O_RDONLY)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return [st.st_ino, st.st_mtime_ns, st.st_size]


def scan():
    found = {}
    for path in sorted(folder.glob('*.json')):
        try:
            found[path.stem] = signature(path)
        except OSError:
            continue
    return found


try:
    saved = json.loads(state.read_text())
except (OSError, ValueError):
    saved = {}
seen = saved.get(ack, {}).get('signatures', {})
unread = set(saved.get(ack, {}).get('unread', []))
until = time.monotonic() + hold
while True:
    now = scan()
    if now != seen or unread or time.monotonic() >= until:
        break
    time.sleep(1)
failed = []
for name in sorted(now):
    if seen.get(name) == now[name] and name not in unread:
        continue
    try:
        text = json.dumps(json.loads((folder / (name + '.json')).read_text()), separators=(',', ':'))
    except (OSError, ValueError) as exc:
        text = json.dumps({'unreadable': str(exc)})
        failed.append(name)  # read again next round, changed or not
    print(RESULT_MARK + name + ' ' + text)
for name in sorted(set(seen) - set(now)):
    print(GONE_MARK + name)
token = uuid.uuid4().hex[:12]
kept = {token: {'signatures': now, 'unread': failed}}
if ack in saved:
    kept[ack] = saved[ack]
try:
    state.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = state.with_name(state.name + '.tmp')
    temporary.write_text(json.dumps(kept))
    temporary.replace(state)
except OSError as exc:  # the token is then unknown next round: everything is listed again
    print('gpufleet: cannot keep the listing state ' + str(state) + ': ' + str(exc), file=sys.stderr)
print(TOKEN_MARK + token)
"""


def listing_command(folder: str, state: str, ack: str = "", hold_s: float = 0.0) -> str:
    """One command that prints, one line each, every result in ``folder`` that changed since the listing
    ``ack`` (``GPUFLEET_RESULT <node> <json>``; all of them when ``ack`` is empty or unknown), the results
    gone since (``GPUFLEET_GONE <node>``), and this listing's token (``GPUFLEET_LISTED <token>``).
    ``state``: the signatures' file on the controller (``~`` is the SSH user's home). ``hold_s``: when
    nothing changed, look again each second for up to that long before answering (a long poll: the wait
    hears of a node's result within about a second, with one command per ``hold_s`` while nothing comes)."""
    marks = f"RESULT_MARK, GONE_MARK, TOKEN_MARK = {RESULT_MARK!r}, {GONE_MARK!r}, {TOKEN_MARK!r}\n"
    return shlex.join(["python3", "-c", marks + _LISTING, folder, state, ack, f"{hold_s:g}"])


@dataclass
class Listing:
    """One round's listing: the results that changed, the ones gone, and its token (None: no listing)."""

    changed: dict[str, str]
    gone: list[str]
    token: str | None


def read_listing(out: str) -> Listing:
    listing = Listing(changed={}, gone=[], token=None)
    for line in out.splitlines():
        if line.startswith(RESULT_MARK):
            name, _, text = line[len(RESULT_MARK) :].partition(" ")
            listing.changed[name] = text
        elif line.startswith(GONE_MARK):
            listing.gone.append(line[len(GONE_MARK) :].strip())
        elif line.startswith(TOKEN_MARK):
            listing.token = line[len(TOKEN_MARK) :].strip()
    return listing


def drain_command(node: str, reason: str) -> str:
    return shlex.join(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])


def as_root(command: str, user: str) -> str:
    """``command`` as root: as it is for root; through ``sudo -n`` for the image's user on the clouds (it has
    passwordless sudo; -n fails at once rather than waits for a password), as validation does
    (``validate.slurm.SlurmRunner.as_admin``: scontrol's node update is refused to any user but an
    operator)."""
    return command if user == "root" else f"sudo -n sh -c {shlex.quote(command)}"


def probe_command() -> str:
    """What a node that did not show up says of its unit (over SSH, only for those nodes)."""
    return (
        f"systemctl show -p ActiveState -p Result -p ExecMainStatus {UNIT} | tr '\\n' ' '; "
        f"tail -n 2 {shlex.quote(RESULT_FILE.removesuffix('.json') + '.log')} 2>/dev/null | cut -c1-200"
    )


class ClusterView(Protocol):
    """What the wait reads of the cluster, and the one thing it changes (a failed node's drain reason).
    ``results`` returns the results that changed since its last call (all of them the first time), and
    None for a node whose result is gone."""

    def results(self) -> dict[str, str | None]: ...

    def registrations(self) -> str: ...

    def drain(self, node: str, reason: str) -> None: ...

    def probe(self, node: str) -> str: ...


@dataclass
class SlurmView:
    """The cluster through its controller (``controller``) and, for the nodes that never showed up (and
    every node's result where no shared filesystem is), each node itself (``node_executor``)."""

    controller: Executor
    node_executor: Callable[[str], Executor]
    results_dir: str | None  # the shared filesystem's results folder; None: read each node's own file
    nodes: list[str]
    timeout: float = 60
    user: str = "root"  # who the SSH connection logs in as (the drain runs as root: ``as_root``)
    # the listing's signatures on the controller (one file per wait), and the last listing that arrived
    state: str = field(default_factory=lambda: f"~/.cache/gpufleet/wait-{uuid.uuid4().hex[:12]}.json")
    hold_s: float = 0.0  # the listing's long poll (``listing_command``)
    # What the last command on the controller that failed said (named when the wait fails), and how many
    # failed in a row: a round that failed is tried again next round, up to FAILED_ROUNDS in a row.
    last_error: str | None = field(default=None, init=False)
    _failed: int = field(default=0, init=False)
    _ack: str = field(default="", init=False)

    def _on_controller(self, command: str, timeout: float, what: str) -> str | None:
        """The command's output, or None when it failed (SSH lost, a timeout, an exit other
        than 0): kept as ``last_error``; FAILED_ROUNDS failures in a row end the wait."""
        try:
            rc, out, err = self.controller.run(command, timeout)
        except ValidationRunError as exc:
            rc, out, err = 255, "", exc.message.splitlines()[0]
        if rc == 0:
            self._failed = 0
            return out
        self.last_error = f"{what} on the controller failed (exit {rc}): {err.strip()[-300:]}"
        self._failed += 1
        if self._failed >= FAILED_ROUNDS:
            raise ConfigureError(
                f"the wait for the nodes' own configure lost the controller: {self.last_error} "
                f"({self._failed} times in a row)",
                hint="check that the controller is up and answers SSH ('gpufleet status SPEC'), then run "
                "'gpufleet configure SPEC' again (the nodes keep their results)",
            )
        return None

    def results(self) -> dict[str, str | None]:
        if self.results_dir is None:
            return self._each_node()
        command = listing_command(self.results_dir, self.state, self._ack, self.hold_s)
        out = self._on_controller(command, self.timeout + self.hold_s, "the results listing")
        listing = read_listing(out) if out is not None else None
        if listing is None or listing.token is None:
            return {}  # nothing arrived: the next round lists since the last one that did
        self._ack = listing.token
        return {**dict.fromkeys(listing.gone), **listing.changed}

    def close(self) -> None:
        """Remove the listing's state file on the controller (a leftover is a few KB in the user's cache)."""
        if self.results_dir is not None:
            home = "~/" if self.state.startswith("~/") else ""
            path = home + shlex.quote(self.state.removeprefix("~/"))
            with contextlib.suppress(ValidationRunError):
                self.controller.run(f"rm -f -- {path} {path}.tmp", self.timeout)

    def _each_node(self) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for node in self.nodes:
            try:
                rc, out, _ = self.node_executor(node).run(f"cat {shlex.quote(RESULT_FILE)}", 20)
            except ValidationRunError:  # not answering yet: no result yet
                continue
            if rc == 0 and out.strip():
                found[node] = out
        return found

    def registrations(self) -> str:
        return self._on_controller(SINFO, self.timeout, "sinfo") or ""

    def drain(self, node: str, reason: str) -> None:
        rc, _, err = self.controller.run(as_root(drain_command(node, reason), self.user), self.timeout)
        if rc != 0:
            raise ConfigureError(
                f"{node}: its play failed, and slurmctld refused to drain it: {err.strip()[:300]}",
                hint=f"drain it by hand: {drain_command(node, reason)}",
            )

    def probe(self, node: str) -> str:
        try:
            rc, out, err = self.node_executor(node).run(probe_command(), 20)
        except ValidationRunError as exc:
            return (
                f"does not answer SSH ({exc.message.splitlines()[0][:200]}): it did not boot, or is cut off"
            )
        return " ".join(out.split()) or f"exit {rc}: {err.strip()[:200]}"


@dataclass
class BootReport:
    """What the wait found: nodes configured (and registered, for compute nodes), failed (the failed task),
    and missing (what was seen of each)."""

    configured: list[str]
    failed: dict[str, FailedTask]
    missing: dict[str, str]
    results: dict[str, NodeResult]
    waited_s: float
    drained: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.missing

    def lines(self) -> list[str]:
        out = [f"{node}: play failed at '{f.task}': {f.message}" for node, f in sorted(self.failed.items())]
        out += [f"{node}: {seen}" for node, seen in sorted(self.missing.items())]
        return out


def _parse(text: str) -> NodeResult | str:
    """A listed result: the listing turns a file the controller cannot read or parse into
    ``{"unreadable": why}``."""
    try:
        said = json.loads(text)
    except ValueError:
        said = None
    if isinstance(said, dict) and set(said) == {"unreadable"}:
        return (
            f"its result is not JSON or cannot be read (on the controller: {str(said['unreadable'])[:200]})"
        )
    return parse(text)


def _accepted(node: str, found: NodeResult | str | None, image: str | None, run: str | None) -> bool:
    return (
        isinstance(found, NodeResult)
        and found.host == node
        and found.image == image
        and (run is None or found.run == run)
        and not found.running
    )


def wait_for_nodes(
    inventory: Inventory,
    view: ClusterView,
    *,
    run: str | None,
    deadline_s: float,
    poll_s: float = 5,  # at least this long from one round's start to the next's
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    on_round: Callable[[int, int, int], None] | None = None,
) -> BootReport:
    """Wait for every node's result (of ``run``; None: any run of the cluster's image) and every compute
    node's registration, up to ``deadline_s``; then drain and name (see the module doc)."""
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    filters = _slurm_filters()
    nodes = [host.name for host in inventory.hosts]
    compute = [host.name for host in inventory.compute]
    image = inventory.baked_image_hash
    start = clock()
    parsed: dict[str, NodeResult | str | None] = dict.fromkeys(nodes)
    unregistered: Mapping[str, str] = {}
    while True:
        began = clock()
        for node, text in view.results().items():  # only what changed since the last round
            if node in parsed:
                parsed[node] = None if text is None else _parse(text)
        unregistered = filters.slurm_registrations(view.registrations(), compute)
        accepted = {
            n: r for n, r in parsed.items() if isinstance(r, NodeResult) and _accepted(n, r, image, run)
        }
        passed = {n for n, r in accepted.items() if r.ok}
        waiting = [n for n in nodes if n not in accepted] + [
            n for n in compute if n in passed and n in unregistered
        ]
        if on_round is not None:
            on_round(len(accepted), len(nodes), len(compute) - len(unregistered))
        if not waiting or clock() - start >= deadline_s:
            break
        sleep(max(0.0, poll_s - (clock() - began)))
    return _report(nodes, compute, parsed, unregistered, view, image=image, run=run, waited=clock() - start)


def _report(
    nodes: list[str],
    compute: list[str],
    parsed: Mapping[str, NodeResult | str | None],
    unregistered: Mapping[str, str],
    view: ClusterView,
    *,
    image: str | None,
    run: str | None,
    waited: float,
) -> BootReport:
    report = BootReport(configured=[], failed={}, missing={}, results={}, waited_s=waited)
    for node in nodes:
        found = parsed.get(node)
        registered = node not in unregistered
        if _accepted(node, found, image, run):
            assert isinstance(found, NodeResult)
            report.results[node] = found
            if found.failed is not None or not found.ok:
                report.failed[node] = found.failed or FailedTask(task="ansible-playbook", message="failed")
                if node in compute and registered:
                    view.drain(node, (REASON_PREFIX + report.failed[node].task)[:REASON_LIMIT])
                    report.drained.append(node)
            elif node in compute and not registered:
                report.missing[node] = f"its play passed, but {unregistered[node]}: {view.probe(node)}"
            else:
                report.configured.append(node)
            continue
        if isinstance(found, str):
            seen = found
        elif isinstance(found, NodeResult) and found.image != image:
            seen = f"its result names the image {str(found.image)[:12]}, the cluster's is {str(image)[:12]}"
        elif isinstance(found, NodeResult) and run is not None and found.run != run:
            seen = f"its result is of run '{found.run}' (waited for '{run}')"
        elif isinstance(found, NodeResult):
            started = time.strftime("%H:%M:%S UTC", time.gmtime(found.started))
            seen = f"its play (run '{found.run}') started at {started} and had not finished"
        else:
            seen = "no result"
        if node in compute:
            seen += "; registered" if registered else f"; not registered ({unregistered[node]})"
        report.missing[node] = f"{seen}; on the node: {view.probe(node)}"
    return report


def result_summary(results: Mapping[str, NodeResult]) -> tuple[int, list[str]]:
    """The changed count and the changed tasks, as a pushed play reports them (``PlayResult``)."""
    changed = [f"{node}: {task}" for node, result in sorted(results.items()) for task in result.changed_tasks]
    return len(changed), changed


def trigger_command(run: str) -> str:
    """What ``gpufleet configure`` runs on every node of a running cluster (one fan-out): the run id, then the
    unit started again (a run in progress is stopped and started over: the roles are idempotent)."""
    return (
        f"mkdir -p /run/gpufleet && printf '%s\\n' {shlex.quote(run)} > /run/gpufleet/configure-run && "
        f"systemctl restart --no-block {UNIT}"
    )


def dumps(report: BootReport) -> str:
    return json.dumps(
        {
            "configured": report.configured,
            "failed": {n: f.model_dump() for n, f in report.failed.items()},
            "missing": report.missing,
            "drained": report.drained,
            "waited_s": round(report.waited_s, 1),
        },
        indent=1,
    )


# How long configure waits for every node: a cloud node's boot (a few minutes for a GPU instance) plus its
# own configure (27.8 s of CPU measured on a local node, docs/benchmarks.md) and the wait for the munge
# key's secret; a node past it is named, not waited for.
DEADLINE_S = 1200.0
# The listing's long poll, and the least time from one round's start to the next's: with a results folder,
# a round answers within about a second of a node's result and makes two commands per HOLD_S while nothing
# changes; reading each node's file over SSH (no shared filesystem), a round every POLL_S.
HOLD_S = 5.0
ROUND_S = 1.0
POLL_S = 5.0
# Commands on the controller that may fail in a row (SSH lost, slurmctld not answering) before the wait ends.
FAILED_ROUNDS = 5
# Nodes the re-run's fan-out reaches at once (each is one SSH command through the cluster's tunnel).
FAN_OUT = 32


def trigger(inventory: Inventory, run: str, reporter: Reporter) -> dict[str, str]:
    """Start every node's unit again with ``run`` as its run id: one SSH command per node, ``FAN_OUT`` at a
    time. The nodes that refused, with why (named again by the wait: they keep their old result)."""
    refused: dict[str, str] = {}

    def start(host: Host) -> None:
        try:
            command = as_root(trigger_command(run), inventory.connection.user)
            rc, _, err = SshExecutor(inventory, host).run(command, 60)
        except GpufleetError as exc:
            refused[host.name] = exc.message.splitlines()[0]
            return
        if rc != 0:
            refused[host.name] = f"exit {rc}: {err.strip()[:200]}"

    with (
        reporter.step(f"start the node's own configure on {len(inventory.hosts)} nodes (run {run})"),
        ThreadPoolExecutor(max_workers=min(FAN_OUT, len(inventory.hosts))) as pool,
    ):
        list(pool.map(start, inventory.hosts))
    return refused


def configure_at_boot(
    inventory: Inventory, reporter: Reporter, *, rerun: bool, deadline_s: float = DEADLINE_S
) -> PlayResult:
    """``gpufleet configure`` of nodes that configure themselves: after ``up``, wait for the boot's results;
    on a running cluster (``rerun``), start every node's unit again first and wait for that run. A failed or
    missing node is a ``ConfigureError`` naming each (the others stay configured; a failed compute node
    stays drained with its failed task as the reason)."""
    run = f"r-{uuid.uuid4().hex[:12]}" if rerun else None
    refused = trigger(inventory, run, reporter) if run is not None else {}
    mount = shared_results_dir(inventory.filesystem)
    view = SlurmView(
        controller=SshExecutor(inventory, inventory.controller),
        node_executor=lambda name: SshExecutor(inventory, next(h for h in inventory.hosts if h.name == name)),
        results_dir=mount,
        nodes=[host.name for host in inventory.hosts],
        user=inventory.connection.user,
        hold_s=HOLD_S if mount is not None else 0.0,
    )

    def said(results: int, nodes: int, registered: int) -> None:
        reporter.info(f"  {results}/{nodes} nodes have a result, {registered} compute nodes registered")

    what = "their results" if run is None else f"run {run}"
    with reporter.step(
        f"wait for {len(inventory.hosts)} nodes' own configure ({what}), up to {deadline_s:.0f} s"
    ):
        try:
            report = wait_for_nodes(
                inventory,
                view,
                run=run,
                deadline_s=deadline_s,
                poll_s=ROUND_S if mount is not None else POLL_S,
                on_round=said,
            )
        except Interrupted:
            raise  # no command on the cluster after a signal (the listing's few KB stay in the user's cache)
        except BaseException:
            view.close()
            raise
        view.close()
    for node, why in refused.items():
        if node in report.missing:
            report.missing[node] += f"; its unit could not be started: {why}"
    changed, changed_tasks = result_summary(report.results)
    if not report.ok:
        lines = "\n".join(f"  - {line}" for line in report.lines())
        if view.last_error:  # what the wait itself could not read, last
            lines += f"\n  (and {view.last_error})"
        raise ConfigureError(
            f"{len(report.failed)} node(s) failed their own configure and {len(report.missing)} never "
            f"showed up (waited {report.waited_s:.0f} s of {deadline_s:.0f}):\n{lines}",
            hint="a failed node stays drained with its failed task as the reason: repair it (its log is "
            f"{RESULT_FILE.removesuffix('.json')}.log on the node, 'journalctl -u {UNIT}'), then run "
            "'gpufleet configure SPEC' again (it starts every node's unit again) and 'gpufleet validate "
            "SPEC' (it releases the nodes that pass); a node that never booted: 'gpufleet up SPEC'",
        )
    return PlayResult(
        ok=True, changed=changed, changed_tasks=changed_tasks, stats={"nodes": len(report.results)}
    )
