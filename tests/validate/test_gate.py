"""The gate: correctness, transport and large-message bandwidth against a floor or a catalog baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.catalog import Catalog
from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.validate.gate import FAIL, INFO, PASS, WARN, GateConfig, judge
from gpufleet.validate.nccl_log import parse_log, parse_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
G = 1 << 30

# A catalog of our own, so the tests do not move when the shipped catalog's figures are updated.
CATALOG = Catalog.model_validate(
    {
        "sources": {
            "bench": {
                "title": "Test bench results",
                "url": "https://example.org/bench",
                "retrieved": "2026-01-01",
            }
        },
        "instance_types": {
            "h200x1": {
                "provider": "gcp",
                "description": "1 GPU + 1 NIC per node",
                "gpu": {
                    "model": "H200",
                    "arch": "sm_90",
                    "count": 1,
                    "memory_gib": 141,
                    "nvlink": False,
                    "nvswitch": False,
                },
                "fabric": {"kind": "roce", "bandwidth_gbps": 400, "interfaces": 1},
                "baselines": [
                    {
                        "collective": "all_reduce",
                        "nodes": 2,
                        "message_bytes": 2 * G,
                        "busbw_gbps": 40.0,
                        "source": "bench",
                    },
                    {
                        "collective": "all_gather",
                        "nodes": 2,
                        "message_bytes": 3 * G,
                        "busbw_gbps": 30.0,
                        "source": "bench",
                    },
                ],
            },
            "h100x8": {
                "provider": "aws",
                "description": "8 GPUs",
                "gpu": {
                    "model": "H100",
                    "arch": "sm_90",
                    "count": 8,
                    "memory_gib": 80,
                    "nvlink": True,
                    "nvswitch": True,
                },
                "fabric": {"kind": "efa", "bandwidth_gbps": 3200, "interfaces": 32},
                "baselines": [
                    {
                        "collective": "all_gather",
                        "nodes": 2,
                        "message_bytes": 8 * G,
                        "busbw_gbps": 250.0,
                        "source": "bench",
                    }
                ],
            },
        },
    }
)


def _test(number: str):
    (path,) = FIXTURES.glob(f"{number}-*.log")
    return parse_log(path)[0]


def _check(verdict, name):
    return [check for check in verdict.checks if check.name == name]


def test_floor_judged_at_the_largest_size_at_or_above_the_threshold():
    verdict = judge(_test("06"), GateConfig(min_busbw={"reduce_scatter": 300.0}), CATALOG)
    assert verdict.passed and verdict.mode == "floor"
    assert (verdict.measured_busbw, verdict.measured_bytes) == (362.55, 8 * G)
    assert verdict.threshold == 300.0
    assert "floor 300" in verdict.summary


def test_a_verdicts_mode_is_a_gate_mode_that_reads_as_its_word():
    """Verdict.mode is one of three (GateMode), and the JSON and the tables still say the word."""
    import json

    from gpufleet.validate.gate import GateMode

    floor = judge(_test("06"), GateConfig(min_busbw={"reduce_scatter": 300.0}), CATALOG)
    plain = judge(_test("05"), GateConfig(), CATALOG)
    assert (floor.mode, plain.mode) == (GateMode.FLOOR, GateMode.CORRECTNESS_ONLY)
    assert (
        json.loads(json.dumps(floor.to_json()))["mode"] == "floor" and f"{plain.mode}" == "correctness-only"
    )
    modes = {"baseline", "floor", "site-baseline", "bound", "correctness-only"}
    assert {mode.value for mode in GateMode} == modes


def test_floor_not_reached_fails_with_the_figures():
    # Below the drain floor (500 x 0.67 / 0.9 = 372.2): FAIL.
    verdict = judge(_test("06"), GateConfig(min_busbw={"reduce_scatter": 500.0}), CATALOG)
    assert not verdict.passed and verdict.tier == FAIL
    (bandwidth,) = _check(verdict, "bandwidth")
    assert bandwidth.status == FAIL
    assert (
        "busbw 362.55 GB/s at 8G (line 48) is below the floor 500 GB/s "
        "(spec validation.min_busbw.reduce_scatter) and below the drain floor 372.2 GB/s"
    ) in bandwidth.message


def test_floor_missed_above_the_drain_floor_warns():
    # Below the floor but above 400 x 0.67 / 0.9 = 297.8: WARN, which the suite re-runs once.
    verdict = judge(_test("06"), GateConfig(min_busbw={"reduce_scatter": 400.0}), CATALOG)
    assert not verdict.passed and verdict.tier == WARN and not verdict.failures
    (bandwidth,) = _check(verdict, "bandwidth")
    assert bandwidth.status == WARN and "above the drain floor 297.8 GB/s: re-run once" in bandwidth.message
    assert verdict.summary.startswith("WARN reduce_scatter: busbw 362.55 GB/s")


def test_baseline_read_at_its_own_message_size_when_the_log_has_it():
    # fixture 14: all_reduce on 2 nodes x 1 H200; the baseline is 40 GB/s at 2G, margin 0.9 -> 36
    verdict = judge(_test("14"), GateConfig(instance_type="h200x1"), CATALOG)
    assert verdict.mode == "baseline" and verdict.nodes == 2
    assert (verdict.measured_bytes, verdict.measured_busbw) == (2 * G, 31.80)  # not 8G's 31.89
    assert verdict.threshold == pytest.approx(36.0)
    assert not verdict.passed
    assert verdict.baseline == {
        "busbw": 40.0,
        "message_bytes": 2 * G,
        "nodes": 2,
        "placement": "out-of-place",
        "versions": {"nccl": None, "plugin": None, "driver": None},
        "scheduler": None,
        "provider_note": None,
        "source": "bench",
        "title": "Test bench results",
        "url": "https://example.org/bench",
        "note": None,
    }
    message = _check(verdict, "bandwidth")[0].message
    assert "0.9 x baseline 40 GB/s (2 nodes, 2G out-of-place; Test bench results)" in message


def test_margin_moves_the_threshold():
    verdict = judge(_test("14"), GateConfig(instance_type="h200x1", margin=0.75), CATALOG)
    assert verdict.passed and verdict.threshold == pytest.approx(30.0)
    assert verdict.margin == 0.75


def test_baseline_size_missing_from_the_log_uses_the_largest_row():
    # fixture 13: all_gather, 2 nodes x 8 B200; h100x8's baseline is at 8G, which the log has;
    # h200x1's all_gather baseline is at 3G, which it does not: the largest row (8G) is read.
    test = _test("13")
    at_8g = judge(test, GateConfig(instance_type="h100x8"), CATALOG)
    assert (at_8g.measured_bytes, at_8g.measured_busbw, at_8g.passed) == (8 * G, 260.03, True)
    no_3g = judge(test, GateConfig(instance_type="h200x1", nodes=2), CATALOG)
    assert (no_3g.measured_bytes, no_3g.measured_busbw) == (8 * G, 260.03)


def test_never_the_average_over_all_sizes():
    # fixture 01 prints 'Avg bus bandwidth 1.15327', dragged down by small messages; at 1G it reads 3.11
    test = _test("01")
    verdict = judge(test, GateConfig(min_busbw={"all_reduce": 3.0}), CATALOG)
    assert test.avg_busbw < 3.0 and verdict.passed and verdict.measured_busbw == 3.11


def test_smaller_gate_size_reads_a_smaller_row():
    verdict = judge(_test("12"), GateConfig(gate_min_bytes=4 << 20, min_busbw={"all_reduce": 2.0}), CATALOG)
    assert verdict.measured_bytes == 2 * G  # still the largest at or above 4M


def test_no_row_large_enough_fails_when_bandwidth_is_judged():
    verdict = judge(_test("05"), GateConfig(min_busbw={"sendrecv": 10.0}), CATALOG)
    (bandwidth,) = _check(verdict, "bandwidth")
    assert bandwidth.status == FAIL and "no row at or above gate_min_bytes 1G (largest measured: 512M)" in (
        bandwidth.message
    )


def test_correctness_only_without_baseline_or_floor():
    verdict = judge(_test("05"), GateConfig(), CATALOG)
    assert verdict.passed and verdict.mode == "correctness-only"
    assert "CORRECTNESS ONLY" in _check(verdict, "bandwidth")[0].message
    assert "correctness only" in verdict.summary.lower()


def test_unknown_node_count_means_no_baseline_lookup():
    verdict = judge(_test("10"), GateConfig(instance_type="h100x8", collective="all_reduce"), CATALOG)
    assert verdict.mode == "correctness-only"
    assert any("pass --nodes" in check.message for check in verdict.warnings)


def test_node_count_from_ranks_and_gpus_per_node():
    test = _test("08")  # 16 ranks from the row shape, no device list
    verdict = judge(test, GateConfig(instance_type="h100x8"), CATALOG)
    assert verdict.nodes == 2 and verdict.mode == "baseline"


def test_wrong_counts_fail():
    verdict = judge(_test("07"), GateConfig(), CATALOG)
    (wrong,) = _check(verdict, "wrong")
    assert wrong.status == FAIL
    assert wrong.message.startswith("#wrong > 0 in 6 rows, 3935945 elements in all: 2M (27743), 4M (221159)")


def test_out_of_bounds_fail():
    verdict = judge(_test("03"), GateConfig(), CATALOG)
    assert not verdict.passed
    assert _check(verdict, "out_of_bounds")[0].message == "4 out-of-bounds values: results were wrong"
    assert _check(verdict, "wrong")[0].status == INFO  # legacy log: no #wrong column


def test_na_everywhere_is_a_warning_not_a_pass():
    verdict = judge(_test("08"), GateConfig(), CATALOG)
    assert _check(verdict, "wrong")[0].status == WARN
    assert "did not check its data" in _check(verdict, "wrong")[0].message


def test_failure_lines_fail():
    verdict = judge(_test("20"), GateConfig(), CATALOG)
    assert not verdict.passed
    assert "Test CUDA failure common.cu:389" in _check(verdict, "failures")[0].message
    assert "(and 6 more)" in _check(verdict, "failures")[0].message


def test_truncated_log_fails_only_when_completeness_is_required():
    test = _test("09")
    assert judge(test, GateConfig(), CATALOG).passed
    strict = judge(test, GateConfig(require_complete=True), CATALOG)
    assert {c.name for c in strict.failures} == {"out_of_bounds", "completeness"}


def test_avg_busbw_failed_line_fails():
    text = (FIXTURES / "05-h100-sendrecv-2node-inplace-na.log").read_text()
    text = text.replace("# Avg bus bandwidth    : 42.9182 ", "# Avg bus bandwidth    : 42.9182 FAILED")
    verdict = judge(parse_text(text)[0], GateConfig(), CATALOG)
    assert [c.name for c in verdict.failures] == ["avg_busbw"]


@pytest.mark.parametrize(
    ("number", "fabric", "status"),
    [
        ("10", FabricKind.EFA, FAIL),  # Socket on EFA: the silent TCP fallback
        ("10", FabricKind.INFINIBAND, FAIL),
        ("10", FabricKind.ETHERNET, PASS),
        ("01", FabricKind.EFA, PASS),  # aws-ofi-nccl
        ("01", FabricKind.INFINIBAND, FAIL),
        ("12", FabricKind.ROCE, PASS),  # IBext over RoCE
        ("12", FabricKind.INFINIBAND, PASS),
        ("12", FabricKind.EFA, FAIL),
        ("19", FabricKind.INFINIBAND, PASS),
        ("19", FabricKind.TCPXO, FAIL),
        ("14", FabricKind.ROCE, WARN),  # no NCCL INFO lines in the log
        ("06", FabricKind.EFA, INFO),  # one node: no network involved
    ],
)
def test_transport_against_fabric(number, fabric, status):
    verdict = judge(_test(number), GateConfig(fabric=fabric), CATALOG)
    assert _check(verdict, "transport")[0].status == status, _check(verdict, "transport")


def test_wrong_transport_says_so_loudly_with_evidence():
    verdict = judge(_test("10"), GateConfig(fabric=FabricKind.EFA), CATALOG)
    message = _check(verdict, "transport")[0].message
    assert message.startswith("WRONG TRANSPORT: NCCL used Socket, but the fabric is efa, which needs OFI")
    assert "e.g. 'test-nccl-worker-0:22:22 [0] NCCL INFO Using network Socket'" in message
    assert "fi_info -p efa" in message
    assert verdict.summary.startswith("FAIL all_reduce: WRONG TRANSPORT")


def test_missing_transport_fails_when_required():
    verdict = judge(_test("14"), GateConfig(fabric=FabricKind.ROCE, require_transport=True), CATALOG)
    assert _check(verdict, "transport")[0].status == FAIL
    assert "NCCL_DEBUG=INFO" in _check(verdict, "transport")[0].message


def test_one_rank_falling_back_to_sockets_fails():
    info = "".join(f"n{i}:1:1 [0] NCCL INFO Using network IB\n" for i in range(7))
    info += "n7:1:1 [0] NCCL INFO Using network Socket\n"
    text = info + (FIXTURES / "14-gke-h200-dranet-allreduce-mpitrace.log").read_text()
    verdict = judge(parse_text(text)[0], GateConfig(fabric=FabricKind.INFINIBAND), CATALOG)
    message = _check(verdict, "transport")[0].message
    assert "NCCL used Socket" in message and "IB (7 lines), Socket (1 line)" in message


def test_inferred_collective_is_a_warning_and_can_be_set():
    test = _test("09")
    assert _check(judge(test, GateConfig(), CATALOG), "collective")[0].status == WARN
    verdict = judge(test, GateConfig(collective="scatter", min_busbw={"scatter": 70.0}), CATALOG)
    assert verdict.collective == "scatter" and verdict.passed
    assert verdict.measured_busbw == 79.20


def test_named_collective_is_not_overridden():
    verdict = judge(_test("06"), GateConfig(collective="all_reduce"), CATALOG)
    assert verdict.collective == "reduce_scatter"


def test_config_from_spec():
    validation = ValidationSpec(gate_min_bytes="4M", baseline_margin=0.8, min_busbw={"all_reduce": 0.05})
    config = GateConfig.from_spec(validation, fabric=FabricKind.ETHERNET)
    assert (config.gate_min_bytes, config.margin, dict(config.min_busbw)) == (
        4 << 20,
        0.8,
        {"all_reduce": 0.05},
    )
    assert config.fabric is FabricKind.ETHERNET


def test_verdict_json_shape():
    data = judge(_test("14"), GateConfig(instance_type="h200x1"), CATALOG).to_json()
    assert data["measured"] == {"busbw": 31.80, "size": 2 * G, "half": "out-of-place"}
    assert data["passed"] is False and data["mode"] == "baseline" and data["margin"] == 0.9
    assert {check["status"] for check in data["checks"]} <= {PASS, FAIL, WARN, INFO}
