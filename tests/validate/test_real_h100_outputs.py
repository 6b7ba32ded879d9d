"""What gpufleet read on a real H100 (the workplace's lent machine, 2026-11-27; docs/gpu-stack.md,
"Seen on a real GPU"): nccl-tests through Slurm, the node check's report, the training job. The outputs
are kept unchanged in tests/validate/data (README.md and gpu/SOURCES.md say how each was made); these
tests hold the parsers and the judges to them."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.node.node_health import judge, parse_driver_version
from gpufleet.spec.model import TrainingCheck
from gpufleet.validate.nccl_log import parse_log
from gpufleet.validate.slurm import parse_health_output
from gpufleet.validate.training import judge_training, parse_training_log

DATA = Path(__file__).parent / "data"


def test_nccl_tests_on_one_h100_parse_row_for_row() -> None:
    for collective in ("all_reduce", "all_gather"):
        tests = parse_log(DATA / f"nccl-tests-2.19.6-h100-1gpu-{collective}.log")
        assert len(tests) == 1, collective
        test = tests[0]
        assert test.test_name == f"{collective}_perf" and test.ranks == 1
        sizes = [row.size for row in test.rows]
        # -b 8 -e 16G -f 2: 32 sizes; one rank's all_gather prints its first row as size 0 (8 bytes hold
        # two floats, and nccl-tests rounds the per-rank count down to whole elements of every rank)
        assert len(sizes) == 32 and sizes[1:] == [8 << n for n in range(1, 32)], collective
        assert all(row.oop is not None and row.oop.wrong == 0 for row in test.rows)
        assert test.out_of_bounds == 0
    last = parse_log(DATA / "nccl-tests-2.19.6-h100-1gpu-all_reduce.log")[0].rows[-1]
    assert last.oop is not None
    assert last.size == 16 << 30 and last.oop.algbw == 1514.2 and last.oop.busbw == 0.0


def test_the_node_check_judges_a_real_h100_report() -> None:
    reports = parse_health_output((DATA / "gpu" / "node-check-report-h100-vm.txt").read_text())
    assert list(reports) == ["vm"]
    raw = reports["vm"]
    expect = {
        "gpus": 1,
        "driver_branch": 580,
        "fabric": "ethernet",
        "fabric_interfaces": 0,
        "nvswitch": False,
    }
    checks = {name: (status, message) for name, status, message in judge(raw, expect)}
    assert checks["gpus"][0] == "pass" and checks["driver"][0] == "pass", checks
    assert checks["nccl_tests"][0] == "pass", checks
    # captured before munged and slurmd were started: the judge says so, naming each
    assert checks["munge"][0] == "fail" and checks["slurmd"][0] == "fail"
    assert judge(raw, {**expect, "gpus": 8})[0][1] == "fail"


def test_the_driver_version_of_a_nix_built_open_module_is_read() -> None:
    text = (DATA / "gpu" / "proc-driver-nvidia-version-open-580-h100-vm.txt").read_text()
    assert parse_driver_version(text) == {
        "version": "580.159.04",
        "branch": 580,
        "open": True,
        "arch": "x86_64",
    }


def test_the_training_job_on_one_h100_passes_and_resumes_to_the_same_parameters() -> None:
    first = (DATA / "training" / "h100-1gpu-nccl-60steps.log").read_text()
    # Submitted by hand (no TRAIN_EVENT_PARTS, which `gpufleet validate` sets): srun forwarded the 2 KB
    # summary in 1 KiB messages, each labelled, so the log holds it cut in two; the reader joins them.
    cut = [line for line in first.splitlines() if len(line) == len("0: ") + 1024]
    assert len(cut) == 1 and cut[0].startswith('0: GPUFLEET_TRAIN {"allreduce"')
    log = parse_training_log(first)
    summary = log.summaries[0]
    assert (summary["backend"], summary["device"], summary["last_step"]) == ("nccl", "cuda:0", 60)
    result = judge_training(log, TrainingCheck(), nodes=["vm"], ranks_per_node=1, gpu=True, rc=0)
    assert result.passed, [(check.name, check.message) for check in result.checks]
    resumed = parse_training_log((DATA / "training" / "h100-1gpu-nccl-resumed-at-60.log").read_text())
    assert resumed.summaries[0]["param_hash"] == summary["param_hash"] == "210aaf3e299708d8"


def test_a_cut_event_takes_only_its_own_tasks_next_pieces() -> None:
    whole = json.dumps({"kind": "summary", "rank": 1, "param_hash": "ab", "pad": "x" * 40})
    lines = [
        f"1: GPUFLEET_TRAIN {whole[:30]}",
        '0: GPUFLEET_TRAIN {"kind": "resume", "rank": 0, "start_step": 0}',  # another task between
        f"1: {whole[30:]}",
        "1: ValueError: a line of its own",
    ]
    log = parse_training_log("\n".join(lines))
    assert log.summaries[1]["param_hash"] == "ab"
    assert list(log.errors.values()) == ["ValueError: a line of its own"]
