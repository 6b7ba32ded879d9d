"""The training check's verdict: read what examples/jobs/train_ddp.py printed and gate it.

The job prints one ``GPUFLEET_TRAIN {json}`` line per rank and event (start, join, resume, checkpoint,
summary) and train.sbatch one ``GPUFLEET_TRAIN_NODE host=... ifname=...`` line per node before torchrun
starts; srun may prefix or interleave them. ``parse_training_log`` collects them, ``judge_training`` gates
them against the spec's ``validation.training``:

- join: every expected rank joined the process group, each within ``join_timeout``; else the ranks and the
  nodes that did not, and the interface the nodes' NCCL environment named;
- parameters: after the last step every rank's parameter hash is the same, and the mean loss fell;
- stragglers: each rank's own step time, its compute (forward and backward without the all-reduce) plus a
  gradient-sized broadcast from it (its link), over the median rank's. In a DDP step every rank waits for
  the slowest, so the step's wall time is the same everywhere and names nobody; the parts do. Above
  ``max_step_spread`` the slow ranks' nodes are named with the part that is slow;
- all-reduce: DDP's bucket all-reduces, as the job's communication hook timed them, as bus bandwidth
  (nccl-tests' formula for all_reduce, 2(n-1)/n x bytes / time); on GPU clusters at least
  ``min_allreduce_fraction`` of nccl-tests' all_reduce at the nearest size of the same run, else reported;
- checkpoint: written (torch.distributed.checkpoint, atomically) and read back into a fresh model with the
  same parameter hash on every rank; write and read bandwidth reported.
"""

from __future__ import annotations

import base64
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.spec.model import TrainingCheck
from gpufleet.spec.units import about_bytes, format_bytes
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN, Check
from gpufleet.validate.models import TestResult

MARKER = "GPUFLEET_TRAIN "
_NODE_LINE = re.compile(
    r"GPUFLEET_TRAIN_NODE host=(?P<host>\S+)(?: ifname=(?P<ifname>\S*))?(?: missing (?P<missing>\S+))?"
    r"(?: no-torchrun (?P<torchrun>\S+))?"
)
# srun --label's prefix (the task: one per node), and a Python exception's last line after it (torchrun's
# RendezvousTimeoutError, DistNetworkError, ...).
_LABEL = re.compile(r"^\s*(?P<task>\d+): (?P<text>.*)$")
_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception)(?:: .*)?$")
# What a node prints when srun stops its task because another node's failed (a consequence, not a cause):
# torch's SignalException ("Process 123 got signal: 15").
_STOPPED_BY_OTHERS = re.compile(r"SignalException|got signal: \d+")
_JOB_LINE = re.compile(r"GPUFLEET_TRAIN_JOB .*\bhead=(?P<head>\S+)")


@dataclass
class TrainingLog:
    """What one run of the job printed, by kind: rank -> the rank's JSON object."""

    starts: dict[int, dict[str, Any]] = field(default_factory=dict)
    joins: dict[int, dict[str, Any]] = field(default_factory=dict)
    summaries: dict[int, dict[str, Any]] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    resumes: dict[int, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)  # host -> interface its env file named
    missing_env: dict[str, str] = field(default_factory=dict)  # host -> env file it could not source
    # rank (-1: not named) -> why its long events could not be read back (the output was lost, not the rank)
    lost: dict[int, list[str]] = field(default_factory=dict)
    no_torchrun: dict[str, str] = field(default_factory=dict)  # host -> the torchrun it could not find
    errors: dict[str, str] = field(default_factory=dict)  # host (or "task N") -> the last error it printed
    no_space: dict[str, Any] | None = None  # the job's no_space event: its checkpoints would not fit
    head: str = ""  # the node that hosts torchrun's rendezvous (train.sbatch's GPUFLEET_TRAIN_JOB line)


_PART_LINE = re.compile(
    r"GPUFLEET_TRAIN_PART (?P<id>\S+) (?P<index>\d+) (?P<count>\d+) (?P<chunk>[A-Za-z0-9+/=]+)"
)


@dataclass
class _Pieces:
    """The parts of one long event seen so far (``GPUFLEET_TRAIN_PART <id> <index> <count> <chunk>``)."""

    count: int
    chunks: dict[int, str] = field(default_factory=dict)
    clash: bool = False  # one index twice with different text: two events under one id


def _parts(line: str, parts: dict[str, _Pieces], log: TrainingLog) -> bool:
    """A part of a long event (train_ddp.py's ``emit``): kept until all its parts are in, then recorded.
    A group that cannot be put back together (an id that two events share, a part lost on the way, text
    that does not decode) is recorded as lost output under the rank its id names, never dropped quietly."""
    found = _PART_LINE.search(line)
    if not found:
        return False
    ident, index, count = found["id"], int(found["index"]), int(found["count"])
    group = parts.setdefault(ident, _Pieces(count))
    if group.count != count or group.chunks.get(index, found["chunk"]) != found["chunk"]:
        group.clash = True
    group.chunks[index] = found["chunk"]
    if len(group.chunks) < group.count or group.clash:
        return True
    del parts[ident]
    try:
        data = json.loads(base64.b64decode("".join(group.chunks[i] for i in sorted(group.chunks))))
    except ValueError:
        data = None
    if isinstance(data, dict):
        _record(log, data)
    else:
        _lose(log, ident, f"its {count} parts do not decode to one event")
    return True


def _lose(log: TrainingLog, ident: str, why: str) -> None:
    """Lost output of the rank that ``ident`` names (train_ddp.py: ``<rank>.<host>.<pid>.<restart>.<n>``)."""
    head = ident.split(".", 1)[0]
    rank = int(head) if head.isdigit() else -1
    log.lost.setdefault(rank, []).append(f"event {ident}: {why}")


def parse_training_log(text: str) -> TrainingLog:
    """Every ``GPUFLEET_TRAIN`` object in ``text``; several on one line (ranks sharing a file) are split,
    and a long one sent in parts (``GPUFLEET_TRAIN_PART``) is put back together."""
    log = TrainingLog()
    decoder = json.JSONDecoder()
    parts: dict[str, _Pieces] = {}
    tasks: dict[str, str] = {}  # srun --label's task -> the node it ran on
    errors: dict[str, str] = {}  # task -> the last exception line it printed
    for line in _rejoin_cut_lines(text.splitlines(), decoder):
        labelled = _LABEL.match(line)
        said = labelled["text"].strip() if labelled else ""
        if labelled and _ERROR_LINE.match(said) and not _STOPPED_BY_OTHERS.search(said):
            errors[labelled["task"]] = said[:300]
        job = _JOB_LINE.search(line)
        if job:
            log.head = job["head"]
        if _parts(line, parts, log):
            continue
        node = _NODE_LINE.search(line)
        if node:
            if labelled:
                tasks[labelled["task"]] = node["host"]
            if node["missing"]:
                log.missing_env[node["host"]] = node["missing"]
            elif node["torchrun"]:
                log.no_torchrun[node["host"]] = node["torchrun"]
            else:
                log.nodes[node["host"]] = node["ifname"] or ""
            continue
        at = line.find(MARKER)
        while at >= 0:
            try:
                data, end = decoder.raw_decode(line, at + len(MARKER))
            except json.JSONDecodeError:
                break
            if isinstance(data, dict):
                _record(log, data)
            at = line.find(MARKER, end)
    log.errors = {tasks.get(task, f"task {task}"): error for task, error in errors.items()}
    for ident, group in parts.items():
        if group.clash:
            _lose(log, ident, "two events were sent under this one id, their parts mixed")
        else:
            _lose(log, ident, f"{len(group.chunks)} of its {group.count} parts are in the log")
    return log


def _rejoin_cut_lines(lines: list[str], decoder: json.JSONDecoder) -> list[str]:
    """Event lines that srun cut, put back together. srun forwards a task's output in 1 KiB messages and
    ``--label`` prefixes each with the task, so an event printed as one longer line (the job run by hand,
    without TRAIN_EVENT_PARTS) reaches the log as ``0: <first 1024 bytes>`` and ``0: <rest>`` (seen on a
    real H100, tests/validate/data/training/h100-1gpu-nccl-60steps.log). A labelled event whose JSON does
    not end on its line takes the next lines of the same task that start no new marker."""
    out: list[str] = []
    open_at: dict[str, int] = {}  # task -> index in out of its event line still missing its end
    for line in lines:
        labelled = _LABEL.match(line)
        if labelled is None:
            out.append(line)
            continue
        task, said = labelled["task"], labelled["text"]
        if task in open_at and not said.lstrip().startswith("GPUFLEET_"):
            at = open_at[task]
            out[at] += said
            if not _cut_event(out[at], decoder):
                del open_at[task]
            continue
        open_at.pop(task, None)
        out.append(line)
        if _cut_event(line, decoder):
            open_at[task] = len(out) - 1
    return out


def _cut_event(line: str, decoder: json.JSONDecoder) -> bool:
    """A line whose ``GPUFLEET_TRAIN`` object is cut short (not a whole JSON object, no closing brace)."""
    at = line.find(MARKER)
    if at < 0 or line.rstrip().endswith("}"):
        return False
    try:
        decoder.raw_decode(line, at + len(MARKER))
    except json.JSONDecodeError:
        return True
    return False


def _record(log: TrainingLog, data: dict[str, Any]) -> None:
    kind, rank = data.get("kind"), data.get("rank")
    if not isinstance(rank, int):
        return
    if kind == "start":
        log.starts[rank] = data
    elif kind == "join":
        log.joins[rank] = data
    elif kind == "resume":
        log.resumes[rank] = data
    elif kind == "summary":
        log.summaries[rank] = data
    elif kind == "checkpoint":
        log.checkpoints.append(data)
    elif kind == "no_space":
        log.no_space = data


@dataclass
class TrainingResult:
    """The training check's verdict: a report section (``report.Section``)."""

    checks: list[Check]
    nodes: list[str]
    ranks: int
    figures: dict[str, Any] = field(default_factory=dict)
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    stragglers: dict[str, str] = field(default_factory=dict)  # node -> why
    command: str = ""
    log_file: str = ""
    plot: Path | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.status is not FAIL for check in self.checks)

    @property
    def summary(self) -> str:
        failed = [check.message for check in self.checks if check.status is FAIL]
        return "training: " + ("; ".join(failed) if failed else "passed")

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "checks": [check.to_json() for check in self.checks],
            "figures": self.figures,
            "per_rank": self.per_rank,
            "stragglers": self.stragglers,
            "command": self.command,
            "log": self.log_file,
            "plot": self.plot.name if self.plot else None,
        }

    def markdown(self) -> list[str]:
        lines = [f"## Training check: {'PASS' if self.passed else '**FAIL**'}", ""]
        lines.append(
            f"A data-parallel PyTorch job (examples/jobs/train.sbatch) on {len(self.nodes)} node(s), "
            f"{self.ranks} rank(s); log: {self.log_file or '-'}"
        )
        lines.append("")
        marks = {PASS: "ok", FAIL: "FAIL", WARN: "warn", INFO: "info"}
        lines.extend(f"- [{marks.get(c.status, 'info')}] {c.name}: {c.message}" for c in self.checks)
        if self.figures:
            lines += ["", "| figure | value |", "|---|---|"]
            lines.extend(f"| {name} | {value} |" for name, value in self.figures.items())
        if self.plot is not None:
            lines += [
                "",
                f"![each rank's own step time: compute and the broadcast from it]({self.plot.name})",
            ]
        if self.per_rank:
            lines += [
                "",
                "| rank | node | join (s) | median step (s) | compute (s) | broadcast from it (s) "
                "| own step (s) "
                "| parameters |",
                "|---:|---|---:|---:|---:|---:|---:|---|",
            ]
            for row in self.per_rank:
                lines.append(
                    "| "
                    + " | ".join(
                        "-" if row.get(key) is None else str(row[key])
                        for key in (
                            "rank",
                            "host",
                            "join_s",
                            "step_s",
                            "compute_s",
                            "broadcast_s",
                            "own_s",
                            "hash",
                        )
                    )
                    + " |"
                )
        return lines


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


Summaries = dict[int, dict[str, Any]]


def judge_training(
    log: TrainingLog,
    config: TrainingCheck,
    *,
    nodes: list[str],
    ranks_per_node: int,
    gpu: bool,
    rc: int,
    stderr: str = "",
    nccl_all_reduce: TestResult | None = None,
) -> TrainingResult:
    """Gate one run of the job on ``nodes`` (``ranks_per_node`` each); see the module doc. Each verdict is
    one function, in the order the report lists them; a job that stopped before its first step, or whose
    ranks printed no summary, is judged no further."""
    expected = len(nodes) * max(ranks_per_node, 1)
    result = TrainingResult([], list(nodes), expected, {})
    result.checks.extend(_judge_start(log))
    _judge_join(result, log, config, stderr)
    if log.no_space is not None:
        result.checks.append(_judge_no_space(log.no_space))
        return result
    summaries = {rank: data for rank, data in log.summaries.items() if 0 <= rank < expected}
    result.checks.extend(_judge_finish(log, summaries, expected, rc))
    if not summaries:
        return result
    _judge_parameters(result, summaries)
    _judge_loss(result, summaries)
    _judge_stragglers(result, summaries, config)
    _step_figures(result, summaries)
    _judge_ddp_allreduce(result, summaries, config, gpu, nccl_all_reduce)
    _judge_checkpoint(result, summaries)
    return result


def _judge_start(log: TrainingLog) -> list[Check]:
    """The nodes that could not start the job: no NCCL environment file, or no torchrun."""
    checks = []
    if log.missing_env:
        shown = ", ".join(f"{host} ({path})" for host, path in sorted(log.missing_env.items()))
        checks.append(
            Check("environment", FAIL, f"no NCCL environment file on {shown}: run gpufleet configure")
        )
    if log.no_torchrun:
        shown = ", ".join(f"{host} ({path})" for host, path in sorted(log.no_torchrun.items()))
        message = f"torchrun is missing on {shown}: install software.pytorch (gpufleet configure)"
        checks.append(Check("start", FAIL, message))
    return checks


def _judge_join(result: TrainingResult, log: TrainingLog, config: TrainingCheck, stderr: str) -> None:
    """Every expected rank joined the process group, each within ``join_timeout``."""
    bound = config.join_timeout.total_seconds()
    joined = {rank: data for rank, data in log.joins.items() if 0 <= rank < result.ranks}
    late = {rank: data for rank, data in joined.items() if float(data.get("join_s", 0)) > bound}
    missing = sorted(set(range(result.ranks)) - set(joined))
    if missing or late:
        result.checks.append(_join_failure(log, result, missing, late, bound, stderr))
        return
    slowest = max((float(d.get("join_s", 0)) for d in joined.values()), default=0.0)
    message = f"{result.ranks} rank(s) joined, the slowest in {slowest:.2f} s (bound {bound:g} s)"
    result.checks.append(Check("join", PASS, message))
    result.figures["join, slowest rank (s)"] = _rounded(slowest)


def _join_failure(
    log: TrainingLog,
    result: TrainingResult,
    missing: list[int],
    late: dict[int, dict[str, Any]],
    bound: float,
    stderr: str,
) -> Check:
    """The ranks that did not join or joined late, the nodes where no rank started or torchrun waited, each
    node's own last error, and the interface the nodes' NCCL environment named."""
    started_hosts = {str(data.get("host")) for data in log.starts.values()}
    # torchrun was run where the node printed its line (the env file sourced); its workers start only
    # once every node's agent has joined the rendezvous.
    waited = sorted(set(log.nodes) - started_hosts - set(log.no_torchrun))
    seen = started_hosts | set(log.nodes) | set(log.no_torchrun)
    silent = [node for node in result.nodes if not {node, node.split(".")[0]} & seen]
    parts = []
    if missing:
        parts.append(f"rank(s) {_ranges(missing)} of {result.ranks} did not join")
    if waited:
        parts.append(
            f"torchrun ran on {', '.join(waited)} but no worker started there (its rendezvous"
            + (f" on {log.head}" if log.head else "")
            + " did not complete)"
        )
    if late:
        parts.append(
            "joined after the "
            + f"{bound:g} s bound: "
            + ", ".join(
                f"rank {r} on {d.get('host')} ({float(d['join_s']):.1f} s)" for r, d in sorted(late.items())
            )
        )
    if silent:
        parts.append(f"no rank started on {', '.join(silent)}")
    # Each node's own last error from the job log (srun --label names its task): which node could not
    # reach the rendezvous, and torch's words for it.
    said = [f"{host}: {error}" for host, error in sorted(log.errors.items())]
    if said:
        parts.append("the job log says " + "; ".join(said))
    interfaces = sorted({name for name in log.nodes.values() if name}) or ["(none named)"]
    parts.append(
        f"interface {', '.join(interfaces)} (NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME of the nodes' env file)"
    )
    tail = (stderr.strip().splitlines() or [""])[-1][:300]
    if tail and not said:
        parts.append(f"last error: {tail}")
    return Check("join", FAIL, "; ".join(parts))


def _judge_no_space(room: dict[str, Any]) -> Check:
    """The job's no_space event: its checkpoints would not fit, so it stopped before its first step."""
    free, wanted = about_bytes(int(room.get("available", 0))), about_bytes(int(room.get("needed", 0)))
    each = about_bytes(int(room.get("checkpoint_bytes", 0)))
    return Check(
        "checkpoint",
        FAIL,
        f"{room.get('path')} has {free} free; the job's checkpoints need {wanted} "
        f"({room.get('keep')} kept and one being written, {each} each): the job stopped before its "
        "first step; free space on that filesystem",
    )


def _judge_finish(log: TrainingLog, summaries: Summaries, expected: int, rc: int) -> list[Check]:
    """Every rank printed its summary (a rank whose summary the log lost is said apart from one that printed
    none), and a job whose every rank finished exited 0."""
    checks = []
    absent = sorted(set(range(expected)) - set(summaries))
    garbled = [rank for rank in absent if rank in log.lost]
    quiet = [rank for rank in absent if rank not in log.lost]
    if quiet:
        message = f"rank(s) {_ranges(quiet)} printed no summary (the job exit code {rc}); see the job log"
        checks.append(Check("finish", FAIL, message))
    if garbled:
        why = "; ".join(f"rank {rank}: {'; '.join(log.lost[rank])}" for rank in garbled)
        checks.append(
            Check(
                "finish",
                FAIL,
                f"the job log lost the summary of rank(s) {_ranges(garbled)}, so their result cannot be "
                f"judged (the output was lost, not necessarily the rank; the job exit code {rc}): {why}",
            )
        )
    if summaries and rc != 0 and len(summaries) == expected:
        checks.append(Check("exit", FAIL, f"every rank finished but the job exited with code {rc}"))
    return checks


def _judge_parameters(result: TrainingResult, summaries: Summaries) -> None:
    """After the last step every rank's parameter hash is the same."""
    hashes = {rank: str(data.get("param_hash")) for rank, data in summaries.items()}
    if len(set(hashes.values())) == 1:
        result.checks.append(
            Check(
                "parameters",
                PASS,
                f"bit-identical on all {len(hashes)} rank(s) after step "
                f"{summaries[min(summaries)].get('last_step')} (hash {next(iter(hashes.values()))})",
            )
        )
        return
    groups: dict[str, list[int]] = {}
    for rank, value in sorted(hashes.items()):
        groups.setdefault(value, []).append(rank)
    shown = "; ".join(f"{value}: rank(s) {_ranges(ranks)}" for value, ranks in groups.items())
    result.checks.append(
        Check("parameters", FAIL, f"the ranks' parameters differ after the last step ({shown})")
    )


def _judge_loss(result: TrainingResult, summaries: Summaries) -> None:
    """The mean loss of the ranks fell from the first step to the last."""
    firsts = [float(d["first_loss"]) for d in summaries.values() if d.get("first_loss") is not None]
    lasts = [float(d["last_loss"]) for d in summaries.values() if d.get("last_loss") is not None]
    if not (firsts and lasts):
        return
    first, last = statistics.fmean(firsts), statistics.fmean(lasts)
    result.figures["loss, first -> last step (mean of ranks)"] = f"{first:.4f} -> {last:.4f}"
    status = PASS if last < first else FAIL
    message = f"mean loss {first:.4f} -> {last:.4f}" + ("" if last < first else ": it did not fall")
    result.checks.append(Check("loss", status, message))


def _judge_stragglers(result: TrainingResult, summaries: Summaries, config: TrainingCheck) -> None:
    """Each rank's own step time (its compute plus a gradient-sized broadcast from it) over the median
    rank's; above ``max_step_spread`` the slow ranks' nodes are named with the part that is slow. Fills
    the per-rank table as it goes."""
    broadcast = next((d.get("broadcast_s") for d in summaries.values() if d.get("broadcast_s")), None) or []
    own = _own_step_times(result, summaries, broadcast)
    if len(own) < 2:
        result.checks.append(
            Check("stragglers", WARN, "the job printed no per-rank compute and broadcast times")
        )
        return
    middle = statistics.median(own.values())
    spread = max(own.values()) / middle if middle > 0 else float("inf")
    bound = config.max_step_spread
    result.figures["own step time spread, max/median"] = _rounded(spread)
    result.figures["straggler bound"] = bound
    if spread <= bound:
        message = f"own step time max/median {spread:.2f} (bound {bound:g})"
        result.checks.append(Check("stragglers", PASS, message))
        return
    computes = statistics.median(float(summaries[r]["compute_s"]) for r in own)
    sends = statistics.median(float(broadcast[r]) for r in own)
    for rank, own_s in sorted(own.items(), key=lambda item: -item[1]):
        if own_s <= bound * middle:
            continue
        data = summaries[rank]
        compute, send = float(data["compute_s"]), float(broadcast[rank])
        part = (
            f"its link: a {format_bytes(int(data.get('grad_bytes') or 0))} broadcast from it "
            f"takes {send:.3g} s (median rank {sends:.3g} s)"
            if send - sends >= compute - computes
            else f"its compute: forward+backward {compute:.3g} s (median rank {computes:.3g} s)"
        )
        why = f"rank {rank}: own step {own_s:.3g} s, {own_s / middle:.1f} x the median rank's; {part}"
        result.stragglers.setdefault(str(data.get("host")), why)
    named = "; ".join(f"{host} ({why})" for host, why in result.stragglers.items())
    message = f"own step time max/median {spread:.2f} > {bound:g}: {named}"
    result.checks.append(Check("stragglers", FAIL, message))


def _own_step_times(result: TrainingResult, summaries: Summaries, broadcast: list[Any]) -> dict[int, float]:
    """Each rank's own step time (compute plus the broadcast from it), where it printed both; each rank's
    row of the per-rank table."""
    own: dict[int, float] = {}
    for rank, data in sorted(summaries.items()):
        steps = [float(x) for x in data.get("step_s") or []]
        compute = data.get("compute_s")
        send = broadcast[rank] if rank < len(broadcast) else None
        if compute is not None and send is not None:
            own[rank] = float(compute) + float(send)
        result.per_rank.append(
            {
                "rank": rank,
                "host": data.get("host"),
                "join_s": data.get("join_s"),
                "step_s": _rounded(statistics.median(steps)) if steps else None,
                "compute_s": compute,
                "broadcast_s": send,
                "own_s": _rounded(own[rank]) if rank in own else None,
                "hash": data.get("param_hash"),
            }
        )
    return own


def _step_figures(result: TrainingResult, summaries: Summaries) -> None:
    """The median DDP step of all ranks, and the slowest rank's time to its first step (reported only)."""
    steps_all = [float(x) for d in summaries.values() for x in d.get("step_s") or []]
    if steps_all:
        result.figures["DDP step, median of all ranks (s)"] = _rounded(statistics.median(steps_all))
    ttfs = [
        float(d["time_to_first_step_s"])
        for d in summaries.values()
        if d.get("time_to_first_step_s") is not None
    ]
    if ttfs:
        result.figures["time to first step, slowest rank (s)"] = _rounded(max(ttfs))


def _judge_ddp_allreduce(
    result: TrainingResult,
    summaries: Summaries,
    config: TrainingCheck,
    gpu: bool,
    nccl_all_reduce: TestResult | None,
) -> None:
    """DDP's bucket all-reduces as bus bandwidth; on GPU ranks at least ``min_allreduce_fraction`` of
    nccl-tests' all_reduce at the nearest size, else reported."""
    world = len(summaries)
    samples = [
        (int(e["bytes"]), float(e["s"]))
        for d in summaries.values()
        for e in d.get("allreduce") or []
        if float(e.get("s", 0)) > 0
    ]
    if not samples or world <= 1:
        return
    size = statistics.median(size for size, _ in samples)
    busbw = statistics.median(b / s * 2 * (world - 1) / world for b, s in samples) / 1e9
    measured = f"DDP all-reduce {busbw:.3g} GB/s at {format_bytes(int(size))}"
    result.figures["DDP all-reduce bus bandwidth (GB/s)"] = f"{_rounded(busbw)} at {format_bytes(int(size))}"
    reference = _nccl_busbw_at(nccl_all_reduce, int(size)) if nccl_all_reduce is not None else None
    if gpu and reference is not None:
        needed = config.min_allreduce_fraction * reference[1]
        status = PASS if busbw >= needed else FAIL
        message = (
            f"{measured}; nccl-tests all_reduce {reference[1]:.3g} GB/s at {format_bytes(reference[0])}, "
            f"needed {config.min_allreduce_fraction:g} x = {needed:.3g}"
        )
        result.checks.append(Check("allreduce", status, message))
        return
    why = "CPU ranks: reported, not gated" if not gpu else "no nccl-tests all_reduce row to compare with"
    if reference is not None:
        why += f"; nccl-tests all_reduce {reference[1]:.3g} GB/s at {format_bytes(reference[0])}"
    result.checks.append(Check("allreduce", INFO, f"{measured} ({why})"))


def _judge_checkpoint(result: TrainingResult, summaries: Summaries) -> None:
    """The checkpoint written and read back equal on every rank; write and read bandwidth reported."""
    readbacks = {
        rank: d["checkpoint"] for rank, d in summaries.items() if isinstance(d.get("checkpoint"), dict)
    }
    if not readbacks:
        result.checks.append(Check("checkpoint", FAIL, "no rank reported a checkpoint written and read back"))
        return
    unequal = sorted(rank for rank, c in readbacks.items() if not c.get("equal"))
    size = next((int(c["bytes"]) for c in readbacks.values() if c.get("bytes")), 0)
    write_s = max(float(c.get("write_s") or 0) for c in readbacks.values())
    read_s = max(float(c.get("read_s") or 0) for c in readbacks.values())
    path = next(iter(readbacks.values())).get("path")
    if size and write_s > 0:
        result.figures["checkpoint write (MB/s)"] = (
            f"{_rounded(size / write_s / 1e6)} ({format_bytes(size)} in {write_s:.3g} s)"
        )
    if size and read_s > 0:
        result.figures["checkpoint read (MB/s)"] = (
            f"{_rounded(size / read_s / 1e6)} ({format_bytes(size)} in {read_s:.3g} s)"
        )
    if unequal or len(readbacks) < len(summaries):
        absent = sorted(set(summaries) - set(readbacks))
        message = f"{path}: read back different on rank(s) {_ranges(unequal) or '-'}" + (
            f", not read on rank(s) {_ranges(absent)}" if absent else ""
        )
        result.checks.append(Check("checkpoint", FAIL, message))
        return
    message = f"{path} ({format_bytes(size)}) written atomically and read back equal on every rank"
    result.checks.append(Check("checkpoint", PASS, message))


def plot_training(result: TrainingResult, path: Path) -> Path:
    """Each rank's own step time as a stacked bar (compute, then the broadcast from it), the median rank's
    times the straggler bound drawn in; stragglers in red."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = [row for row in result.per_rank if row.get("own_s") is not None]
    figure, axes = plt.subplots(figsize=(max(6, 0.5 * len(rows) + 3), 4.5), dpi=120)
    labels = [f"{row['rank']}\n{row['host']}" for row in rows]
    compute = [float(row["compute_s"]) * 1000 for row in rows]
    send = [float(row["broadcast_s"]) * 1000 for row in rows]
    slow = [str(row["host"]) in result.stragglers for row in rows]
    axes.bar(labels, compute, color="tab:blue", label="compute (forward+backward, no all-reduce)")
    axes.bar(
        labels,
        send,
        bottom=compute,
        color=["tab:red" if s else "tab:orange" for s in slow],
        label="broadcast from it",
    )
    if rows:
        middle = statistics.median(float(row["own_s"]) for row in rows) * 1000
        spread = result.figures.get("own step time spread, max/median")
        axes.axhline(
            middle, color="0.3", linestyle="dotted", linewidth=1, label=f"median rank {middle:.3g} ms"
        )
        bound = result.figures.get("straggler bound")
        if bound:
            axes.axhline(
                middle * bound,
                color="red",
                linestyle="dashed",
                linewidth=1,
                label=f"bound {bound:g} x median",
            )
        axes.set_title(f"training check: each rank's own step time (max/median {spread})")
    axes.set_ylabel("ms")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _nccl_busbw_at(test: TestResult, size: int) -> tuple[int, float] | None:
    """nccl-tests' out-of-place busbw at the row nearest ``size`` (the smallest at or above it, else the
    largest)."""
    rows = sorted((row.size, row.busbw) for row in test.rows if row.busbw is not None and row.size > 0)
    if not rows:
        return None
    above = [row for row in rows if row[0] >= size]
    chosen = above[0] if above else rows[-1]
    return chosen[0], float(chosen[1] or 0.0)


def _ranges(values: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and runs[-1][1] == value - 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
