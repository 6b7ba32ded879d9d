"""The training check's parser and gate, on captured output of real runs of examples/jobs/train_ddp.py
(data/training/README.md says how each was made)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from itertools import zip_longest
from pathlib import Path
from types import SimpleNamespace

import pytest

import source_tree
from factories import HEAD_ROLES, make_host, make_inventory
from gpufleet.spec.model import TrainingCheck
from gpufleet.validate.gate import FAIL, INFO, PASS
from gpufleet.validate.models import Half, Row
from gpufleet.validate.models import TestResult as NcclTest
from gpufleet.validate.training import judge_training, parse_training_log

DATA = Path(__file__).parent / "data" / "training"
CONFIG = TrainingCheck(enabled=True, steps=40, checkpoint_every=10, max_step_spread=3.0)


def read(name: str) -> str:
    return (DATA / name).read_text()


def statuses(result) -> dict[str, str]:
    return {check.name: check.status.value for check in result.checks}


def test_a_healthy_run_passes_every_gate() -> None:
    log = parse_training_log(read("healthy-2ranks.log"))
    assert sorted(log.summaries) == [0, 1] and sorted(log.joins) == [0, 1]
    result = judge_training(log, CONFIG, nodes=["vm"], ranks_per_node=2, gpu=False, rc=0)
    assert result.passed, [c.message for c in result.checks]
    assert statuses(result) == {
        "join": "pass",
        "parameters": "pass",
        "loss": "pass",
        "stragglers": "pass",
        "allreduce": "info",
        "checkpoint": "pass",
    }
    assert "cc4a8540914eedd3" in next(c.message for c in result.checks if c.name == "parameters")
    assert "CPU ranks: reported, not gated" in next(c.message for c in result.checks if c.name == "allreduce")
    assert result.figures["checkpoint write (MB/s)"].endswith("s)")
    assert "DDP all-reduce bus bandwidth (GB/s)" in result.figures
    markdown = "\n".join(result.markdown())
    assert "## Training check: PASS" in markdown and "| 1 | vm |" in markdown


def test_lines_of_two_ranks_on_one_line_are_both_read() -> None:
    lines = read("healthy-2ranks.log").splitlines()
    summaries = [line for line in lines if '"kind": "summary"' in line]
    glued = "srun: " + summaries[0] + summaries[1]  # what an unflushed pair of writes looked like
    assert sorted(parse_training_log(glued).summaries) == [0, 1]


def test_a_rank_that_never_joined_is_named_with_its_node_and_the_interface() -> None:
    text = read("join-timeout.log")
    text = "GPUFLEET_TRAIN_NODE host=e2e-compute-0 ifname=eth0 fabric=ethernet\n" + text
    result = judge_training(
        parse_training_log(text),
        CONFIG,
        nodes=["e2e-compute-0", "e2e-compute-1"],
        ranks_per_node=1,
        gpu=False,
        rc=1,
        stderr=read("join-timeout.log"),
    )
    assert not result.passed
    join = next(c for c in result.checks if c.name == "join")
    assert join.status is FAIL
    assert "rank(s) 0-1 of 2 did not join" in join.message
    assert "no rank started on e2e-compute-1" in join.message
    assert "interface eth0" in join.message and "RendezvousTimeoutError" in join.message


def test_a_late_join_fails_against_the_bound() -> None:
    strict = CONFIG.model_copy(update={"join_timeout": timedelta(milliseconds=100)})
    log = parse_training_log(read("healthy-2ranks.log"))
    result = judge_training(log, strict, nodes=["vm"], ranks_per_node=2, gpu=False, rc=0)
    join = next(c for c in result.checks if c.name == "join")
    assert join.status is FAIL and "rank 0 on vm (0.6 s)" in join.message, join.message


def test_different_parameters_fail_and_name_the_ranks() -> None:
    text = read("healthy-2ranks.log")
    rank1 = next(line for line in text.splitlines() if '"kind": "summary"' in line and '"rank": 1' in line)
    changed = text.replace(
        rank1, rank1.replace('"param_hash": "cc4a8540914eedd3"', '"param_hash": "0000000000000000"')
    )
    result = judge_training(
        parse_training_log(changed), CONFIG, nodes=["vm"], ranks_per_node=2, gpu=False, rc=0
    )
    parameters = next(c for c in result.checks if c.name == "parameters")
    assert parameters.status is FAIL
    assert (
        "cc4a8540914eedd3: rank(s) 0" in parameters.message
        and "0000000000000000: rank(s) 1" in parameters.message
    )


def test_the_slowest_rank_is_named_with_the_part_that_is_slow() -> None:
    # three-ranks.log: rank 2's own step (compute 10.2 ms + broadcast from it 1.9 ms) is 1.11 x the median
    # rank's; a bound of 1.05 names it, the default 1.5 does not.
    log = parse_training_log(read("three-ranks.log"))
    nodes = ["vm"]
    loose = judge_training(log, TrainingCheck(enabled=True), nodes=nodes, ranks_per_node=3, gpu=False, rc=0)
    assert statuses(loose)["stragglers"] == "pass" and loose.stragglers == {}
    tight = TrainingCheck(enabled=True, max_step_spread=1.05)
    result = judge_training(log, tight, nodes=nodes, ranks_per_node=3, gpu=False, rc=0)
    check = next(c for c in result.checks if c.name == "stragglers")
    assert check.status is FAIL
    assert list(result.stragglers) == ["vm"]
    assert result.stragglers["vm"].startswith(
        "rank 2: own step 0.0121 s, 1.1 x the median rank's; its compute"
    )


def test_gpu_all_reduce_is_gated_against_nccl_tests_at_that_size() -> None:
    log = parse_training_log(read("healthy-2ranks.log"))
    bucket = 546856  # the run's one DDP bucket, bytes

    def nccl(busbw: float) -> NcclTest:
        test = NcclTest(file="all_reduce.log", collective="all_reduce")
        for size in (262144, 1048576):
            half = Half(time_us=1.0, algbw=busbw, busbw=busbw, wrong=0)
            test.rows.append(Row(size, size // 4, "float", "sum", -1, half, half, 1))
        return test

    low = judge_training(
        log, CONFIG, nodes=["vm"], ranks_per_node=2, gpu=True, rc=0, nccl_all_reduce=nccl(0.001)
    )
    check = next(c for c in low.checks if c.name == "allreduce")
    assert check.status is PASS and "all_reduce 0.001 GB/s at 1M" in check.message, check.message
    high = judge_training(
        log, CONFIG, nodes=["vm"], ranks_per_node=2, gpu=True, rc=0, nccl_all_reduce=nccl(1000.0)
    )
    check = next(c for c in high.checks if c.name == "allreduce")
    assert check.status is FAIL and "needed 0.5 x = 500" in check.message, check.message
    assert bucket < 1048576


def test_a_stopped_run_is_not_a_pass_and_the_resumed_one_ends_where_an_uninterrupted_one_does() -> None:
    stopped = parse_training_log(read("stopped.log"))
    assert all(summary["stopped"] for summary in stopped.summaries.values())
    result = judge_training(stopped, CONFIG, nodes=["vm"], ranks_per_node=2, gpu=False, rc=1)
    assert not result.passed and statuses(result)["checkpoint"] == "fail"
    resumed = parse_training_log(read("resumed.log"))
    assert {r["path"] for r in resumed.resumes.values()} == {stopped.checkpoints[-1]["path"]}
    healthy = parse_training_log(read("healthy-2ranks.log"))
    assert {s["param_hash"] for s in resumed.summaries.values()} == {
        s["param_hash"] for s in healthy.summaries.values()
    }


def test_no_output_at_all_fails_with_the_exit_code() -> None:
    result = judge_training(
        parse_training_log(""), CONFIG, nodes=["a", "b"], ranks_per_node=1, gpu=False, rc=98
    )
    assert not result.passed
    assert "(the job exit code 98)" in next(c.message for c in result.checks if c.name == "finish")


@pytest.mark.parametrize("status", [PASS, INFO])
def test_info_and_pass_do_not_fail(status) -> None:
    from gpufleet.validate.gate import Check
    from gpufleet.validate.training import TrainingResult

    assert TrainingResult([Check("x", status, "m")], ["a"], 1).passed


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"software": {}}, "validation.training needs PyTorch on the compute nodes: set software.pytorch"),
        ({"filesystem": {"kind": "none"}}, "writes its checkpoint to the shared filesystem"),
        ({"software": {"pytorch": "2.13"}}, "expected an exact PyTorch release such as 2.13.0"),
        ({}, None),
    ],
)
def test_the_spec_asks_for_what_the_check_needs(changes: dict, message: str | None) -> None:
    import yaml

    from gpufleet.errors import SpecError
    from gpufleet.spec.load import parse_spec

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "local.yaml").read_text())
    data.update(changes)
    if message is None:
        assert parse_spec(yaml.safe_dump(data)).validation.training.enabled
        return
    with pytest.raises(SpecError, match=message):
        parse_spec(yaml.safe_dump(data))


def test_the_suite_submits_the_template_after_the_collectives_and_reports_it(tmp_path: Path) -> None:
    """run_suite with validation.training on: after the collectives, one login-node command that writes
    examples/jobs/ to the shared filesystem and submits train.sbatch with sbatch --wait on the usable nodes;
    its output (here the captured three-rank run) becomes the report's training section and plot."""
    import base64
    import json
    import re
    import sys

    import yaml

    sys.path.insert(0, str(Path(__file__).parent))
    from validate_fakes import FakeSlurm

    from gpufleet.spec import parse_spec
    from gpufleet.validate.suite import run_suite

    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "examples" / "local.yaml").read_text())
    data["node_groups"][1]["count"] = 3
    spec = parse_spec(yaml.safe_dump(data))
    nodes = [f"demo-compute-{index}" for index in range(3)]
    hosts = [make_host("demo-controller", HEAD_ROLES)]
    hosts += [make_host(node, ip=f"10.0.1.{i}") for i, node in enumerate(nodes)]
    inventory = make_inventory(
        hosts,
        filesystem={"kind": "volume", "mount_point": "/shared"},
        nccl_tests_dir="/opt/gpufleet/mpi-perf/bin",
    )

    submitted: list[str] = []

    class Login(FakeSlurm):
        def run(self, command: str, timeout: float) -> tuple[int, str, str]:
            if "sbatch" in command:
                submitted.append(command)
                return 0, read("three-ranks.log"), ""
            return super().run(command, timeout)

    node_env = {node: {"NCCL_SOCKET_IFNAME": "eth0"} for node in nodes}
    login = Login(nodes, gpus=0, fabric="ethernet", busbw_scale=0.01, node_env=node_env)
    result = run_suite(spec, inventory, login, tmp_path)
    # (the fake's health answers carry no /shared mount: the health section fails, not this test's subject)
    assert result.training is not None and result.training.passed, result.summary
    (command,) = submitted
    assert "--nodelist=demo-compute-0,demo-compute-1,demo-compute-2" in command
    assert "--no-requeue" in command and "TRAIN_STEPS=60" in command and "TRAIN_MAX_REQUEUES=0" in command
    written = dict(re.findall(r"echo (\S+) \| base64 -d > \S+/(train\.sbatch|train_ddp\.py)", command))
    assert {name: base64.b64decode(blob).decode() for blob, name in written.items()} == {
        name: (root / "examples" / "jobs" / name).read_text() for name in ("train.sbatch", "train_ddp.py")
    }
    document = json.loads((tmp_path / "validation-report.json").read_text())
    assert document["training"]["passed"] is True and len(document["training"]["per_rank"]) == 3
    assert (tmp_path / "training.png").stat().st_size > 5_000
    assert "## Training check: PASS" in (tmp_path / "validation-report.md").read_text()
    assert (tmp_path / "logs" / "training.log").read_text().count("GPUFLEET_TRAIN ") >= 12


def judge_local_example(log):
    """The check's verdict on a two-node CPU run with examples/local.yaml's settings."""
    from gpufleet.spec.load import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "local.yaml")
    nodes = ["e2e-compute-0", "e2e-compute-1"]
    return judge_training(log, spec.validation.training, nodes=nodes, ranks_per_node=1, gpu=False, rc=0)


def test_the_local_clusters_own_run_passes_with_the_examples_settings() -> None:
    log = parse_training_log(read("local-cluster-2nodes.log"))
    assert log.nodes == {"e2e-compute-0": "eth0", "e2e-compute-1": "eth0"}
    result = judge_local_example(log)
    assert result.passed, [c.message for c in result.checks]
    assert sorted(row["host"] for row in result.per_rank) == ["e2e-compute-0", "e2e-compute-1"]


def _template_emit() -> dict:
    """examples/jobs/train_ddp.py's own ``emit`` and the constants it reads (the module imports torch)."""
    import ast

    source = ROOT_JOBS.read_text()
    tree = source_tree.parse(source)
    keep = [
        node
        for node in tree.body
        if (isinstance(node, ast.FunctionDef) and node.name == "emit")
        or (
            isinstance(node, ast.Assign)
            and any(
                getattr(t, "id", "") in ("MARKER", "PART_MARKER", "PART_CHARS", "_emitted")
                for t in node.targets
            )
        )
    ]
    namespace: dict = {}
    exec(  # the template's own code, read from the repository
        "import base64, json, os, socket, sys\nfrom typing import Any\n"
        + "\n".join(ast.unparse(node) for node in keep),
        namespace,
    )
    return namespace


ROOT_JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "train_ddp.py"


@pytest.fixture(autouse=True)
def _events_in_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the training check runs the job (training_job.py sets TRAIN_EVENT_PARTS=1): long events in parts."""
    monkeypatch.setenv("TRAIN_EVENT_PARTS", "1")


def test_a_long_event_goes_in_short_parts_that_survive_interleaving(tmp_path: Path) -> None:
    """Slurm forwards a task's output in messages of at most 1 KiB: a summary line of 3 KB was cut at byte
    1024 and the other rank's summary landed inside it, so the check read no summary at all (CI, captured in
    local-cluster-cut-at-1k.log). The template now sends a long event as parts, each line under 1 KiB, and
    the parser puts them back together whatever lies between them."""
    cut = parse_training_log(read("local-cluster-cut-at-1k.log"))
    assert sorted(cut.summaries) == []  # what the old format gave

    namespace = _template_emit()
    summaries = parse_training_log(read("local-cluster-2nodes.log")).summaries
    outputs = []
    for rank in sorted(summaries):
        out = tmp_path / f"rank{rank}.out"
        with out.open("w") as handle:
            namespace["sys"] = SimpleNamespace(stdout=handle)  # emit writes to sys.stdout's descriptor
            data = dict(summaries[rank])
            namespace["emit"](data.pop("kind"), **data)
        outputs.append(out.read_text().splitlines())
    assert all(len(lines) > 1 for lines in outputs), "a summary this long goes in parts"
    assert all(len(line.encode()) < 1024 for lines in outputs for line in lines)
    # The two ranks' parts alternate line by line, with Slurm's own lines between them.
    mixed = [
        line
        for pair in zip_longest(
            *outputs, fillvalue="srun: cluster configuration lacks support for cpu binding"
        )
        for line in (*pair, "srun: error: a line of Slurm's own")
    ]
    assert parse_training_log("\n".join(mixed)).summaries == summaries


def test_two_ranks_on_two_nodes_with_one_process_id_both_have_their_summary(tmp_path: Path) -> None:
    """Every local node is its own PID namespace, so two ranks' torchrun workers can share a process id.
    The parts' id was ``<pid>-<n>``: the two summaries' parts went into one group, and the check said
    "rank(s) 3 printed no summary" of a job that exited 0 (issue 38). The id now names the rank and its
    node, so each summary comes back whole, whatever the process ids."""
    summaries = parse_training_log(read("local-cluster-2nodes.log")).summaries
    outputs = []
    for rank in sorted(summaries):
        namespace = _template_emit()  # one process per rank: its own counter of events
        out = tmp_path / f"rank{rank}.out"
        with out.open("w") as handle:
            namespace["sys"] = SimpleNamespace(stdout=handle)
            namespace["os"] = SimpleNamespace(
                getpid=lambda: 4242, write=os.write, environ={"RANK": str(rank), "SLURM_RESTART_COUNT": "0"}
            )
            namespace["socket"] = SimpleNamespace(gethostname=lambda rank=rank: f"e2e-compute-{rank}")
            data = dict(summaries[rank])
            namespace["emit"](data.pop("kind"), **data)
        outputs.append(out.read_text().splitlines())
    mixed = [line for pair in zip(*outputs, strict=False) for line in pair]
    log = parse_training_log("\n".join(mixed))
    assert log.summaries == summaries
    assert log.lost == {}


def test_a_summary_whose_parts_are_lost_is_named_as_lost_output_not_a_silent_rank() -> None:
    """A long event the log holds only in part (Slurm lost a message, or two events shared an id) is
    reported as the rank's lost output, with what was found, never as a rank that printed nothing."""
    namespace = _template_emit()
    lines: list[str] = []
    summary = dict(parse_training_log(read("local-cluster-2nodes.log")).summaries[1])
    with (Path(os.devnull)).open("w") as sink:
        namespace["sys"] = SimpleNamespace(stdout=sink)
        namespace["os"] = SimpleNamespace(
            getpid=lambda: 7,
            write=lambda _fd, data: lines.append(data.decode().rstrip("\n")),
            environ={"RANK": "1", "TRAIN_EVENT_PARTS": "1"},
        )
        namespace["socket"] = SimpleNamespace(gethostname=lambda: "e2e-compute-1")
        namespace["emit"](summary.pop("kind"), **summary)
    assert len(lines) > 2
    log = parse_training_log("\n".join(lines[:-1]))  # the last part never arrived
    assert 1 in log.lost and 1 not in log.summaries
    assert f"{len(lines) - 1} of its {len(lines)} parts are in the log" in log.lost[1][0]


def test_the_verdict_says_the_output_was_lost_and_what_was_found() -> None:
    """The judge names lost output as such: the rank finished as far as the job knows, its result is
    unreadable, and the check fails saying which, not "printed no summary"."""
    text = read("local-cluster-2nodes.log").splitlines()
    kept = [line for line in text if not ('"kind": "summary"' in line and '"rank": 1' in line)]
    assert len(kept) == len(text) - 1
    log = parse_training_log("\n".join([*kept, "GPUFLEET_TRAIN_PART 1.e2e-compute-1.7.0.1 0 3 eyJr"]))
    result = judge_local_example(log)
    finish = [check.message for check in result.checks if check.name == "finish"]
    assert finish == [
        "the job log lost the summary of rank(s) 1, so their result cannot be judged (the output was lost, "
        "not necessarily the rank; the job exit code 0): rank 1: event 1.e2e-compute-1.7.0.1: 1 of its 3 "
        "parts are in the log"
    ]
    assert not result.passed


def test_run_by_hand_each_event_is_one_readable_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 38: the template run by hand printed its result lines as base64 parts. Without
    TRAIN_EVENT_PARTS (gpufleet validate sets it) a long summary is one JSON line a person can read."""
    monkeypatch.delenv("TRAIN_EVENT_PARTS")
    namespace = _template_emit()
    summary = dict(parse_training_log(read("local-cluster-2nodes.log")).summaries[0])
    out = tmp_path / "by-hand.out"
    with out.open("w") as handle:
        namespace["sys"] = SimpleNamespace(stdout=handle)
        namespace["emit"](summary.pop("kind"), **summary)
    (line,) = out.read_text().splitlines()
    assert line.startswith('GPUFLEET_TRAIN {"allreduce": ') and '"kind": "summary"' in line
    assert sorted(parse_training_log(line).summaries) == [0]


def test_a_checkpoint_filesystem_without_room_stops_the_job_before_it_trains() -> None:
    """Issue 38: a full shared filesystem gave the job a raw OSError/CheckpointException traceback without the
    space needed. The job checks before its first step and says path, needed and available."""
    event = {
        "kind": "no_space", "rank": 0, "host": "e2e-compute-0",
        "path": "/shared/.gpufleet/training/r/checkpoints",
        "needed": 3 * 1_097_808, "available": 262_144, "checkpoint_bytes": 1_097_808, "keep": 2,
    }  # fmt: skip
    text = "0: GPUFLEET_TRAIN_NODE host=e2e-compute-0 ifname=eth0 fabric=ethernet\n"
    text += "1: GPUFLEET_TRAIN_NODE host=e2e-compute-1 ifname=eth0 fabric=ethernet\n"
    text += "".join(
        f'{task}: GPUFLEET_TRAIN {{"kind": "join", "rank": {task}, "host": "e2e-compute-{task}", '
        '"join_s": 1.0}\n'
        for task in (0, 1)
    )
    text += "0: GPUFLEET_TRAIN " + json.dumps(event) + "\n"
    result = judge_training(
        parse_training_log(text), CONFIG, nodes=["e2e-compute-0", "e2e-compute-1"], ranks_per_node=1,
        gpu=False, rc=1,
    )  # fmt: skip
    assert not result.passed
    assert [(c.name, c.status) for c in result.checks] == [("join", PASS), ("checkpoint", FAIL)]
    assert result.checks[1].message == (
        "/shared/.gpufleet/training/r/checkpoints has 256 KiB free; the job's checkpoints need 3.1 MiB (2 "
        "kept and one being written, 1 MiB each): the job stopped before its first step; free space on that "
        "filesystem"
    )


def test_torchrun_missing_is_said_and_never_called_started() -> None:
    """Issue 38: the training line said 'torchrun started' when torchrun was missing."""
    text = "0: GPUFLEET_TRAIN_NODE host=e2e-compute-0 ifname=eth0 fabric=ethernet\n"
    text += "0: GPUFLEET_TRAIN_NODE host=e2e-compute-0 no-torchrun /opt/gpufleet/torch/bin/torchrun\n"
    text += "1: GPUFLEET_TRAIN_NODE host=e2e-compute-1 ifname=eth0 fabric=ethernet\n"
    text += "1: GPUFLEET_TRAIN_NODE host=e2e-compute-1 no-torchrun /opt/gpufleet/torch/bin/torchrun\n"
    result = judge_training(
        parse_training_log(text), CONFIG, nodes=["e2e-compute-0", "e2e-compute-1"], ranks_per_node=1,
        gpu=False, rc=96,
    )  # fmt: skip
    messages = " | ".join(c.message for c in result.checks)
    assert result.checks[0].name == "start" and result.checks[0].message.startswith(
        "torchrun is missing on e2e-compute-0 (/opt/gpufleet/torch/bin/torchrun), e2e-compute-1"
    )
    assert "started" not in messages.replace("no worker started", ""), messages
