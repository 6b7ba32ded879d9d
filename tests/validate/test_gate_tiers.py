"""Issue 33: the physical bound, every catalog type judged on bandwidth, three tiers, the warn re-run, the
ledger and its site baseline, the NCCL environment lint. Real nccl-tests logs (tests/fixtures/nccl-tests)
and the fake Slurm login node of validate_fakes.py."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import ClassVar

import pytest
from test_validation_suite import GPU_SPEC, _inventory
from validate_fakes import FakeSlurm

from gpufleet.catalog import load_catalog
from gpufleet.spec import parse_spec
from gpufleet.spec.model import FabricKind
from gpufleet.validate import ledger
from gpufleet.validate.bound import bound
from gpufleet.validate.gate import FAIL, PASS, WARN, GateConfig, GateMode, SiteBaseline, judge
from gpufleet.validate.nccl_lint import RULES, lint
from gpufleet.validate.nccl_log import parse_log
from gpufleet.validate.suite import run_suite

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
CATALOG = load_catalog()


def _test(prefix: str):
    (path,) = FIXTURES.glob(f"{prefix}-*.log")
    return parse_log(path)[0]


# ---- the bound --------------------------------------------------------------------------------------


def test_the_bound_follows_the_collective_and_the_node_count():
    p5 = CATALOG.get("p5.48xlarge")
    assert p5 is not None
    two = bound(p5, "all_reduce", 2)
    assert two is not None and two.gbps == pytest.approx(2 * 15 / 16 * 400)  # 16 ranks: 2(n-1)/n x B
    assert bound(p5, "all_reduce", 4).gbps == pytest.approx(400)  # ring: B
    assert bound(p5, "all_gather", 2).gbps == pytest.approx(400)
    assert bound(p5, "all_reduce", 1) is None  # one node uses no fabric
    assert bound(p5, "all_reduce", 4).in_network is None  # EFA has no CollNet
    # GCP: the vendor's figure counts the host NICs; the bound is the GPU NICs' 8 x 200 Gb/s.
    assert bound(CATALOG.get("a3-megagpu-8g"), "all_gather", 2).gbps == pytest.approx(200)
    assert "SHARP" in (bound(CATALOG.get("dgx-h100"), "all_reduce", 8).in_network or "")
    gb300 = bound(CATALOG.get("Standard_ND128isr_GB300_v6"), "all_reduce", 18)
    assert gb300 is not None and "NVLink domain" in (gb300.in_network or "")


@pytest.mark.parametrize("nodes", [2, 4, 16])
@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter"])
def test_every_gpu_type_with_a_known_fabric_gets_a_bandwidth_verdict(collective, nodes):
    """Walks the catalog: no GPU type with a fabric figure is judged for correctness only."""
    test = _test("06")  # a real reduce_scatter log, judged as each type's run
    correctness_only = []
    for name, item in CATALOG.instance_types.items():
        if item.gpu is None:
            continue
        config = GateConfig(instance_type=name, nodes=nodes, collective=collective)
        verdict = judge(test, config, CATALOG)
        if verdict.mode is GateMode.CORRECTNESS_ONLY or verdict.threshold is None or verdict.bound is None:
            correctness_only.append(name)
        elif verdict.mode is GateMode.BOUND:
            assert verdict.derived_from and "fraction" in verdict.derived_from, name
    assert correctness_only == []


def test_a_type_without_a_baseline_is_held_to_a_fraction_of_its_bound():
    # p5en has no published figure: p5's 487.09 of its 2-node bound 750 sets the fraction (0.649).
    verdict = judge(_test("06"), GateConfig(instance_type="p5en.48xlarge", nodes=4), CATALOG)
    assert verdict.mode is GateMode.BOUND and verdict.bound is not None
    assert verdict.expected == pytest.approx(487.09 / 750 * 400)
    assert "487.09 of 750 GB/s reached by all_reduce on 2 x p5.48xlarge" in (verdict.derived_from or "")
    assert verdict.tier is PASS  # 362.55 GB/s against a pass mark of 233.8
    # A fabric with no published run takes the lowest fraction of those that have one, and says so.
    tcpx = judge(_test("06"), GateConfig(instance_type="a3-highgpu-8g", nodes=4), CATALOG)
    assert "no published tcpx run: the lowest fraction" in (tcpx.derived_from or "")


def test_a_baseline_from_another_node_count_is_scaled_and_said():
    # p5's 2-node figure (487.09, above B) on 4 nodes: scaled by the ring bound over the tree bound.
    config = GateConfig(instance_type="p5.48xlarge", nodes=4, collective="all_reduce")
    verdict = judge(_test("11"), config, CATALOG)  # a p5 all_reduce row: 438.85 GB/s at 2 GiB
    assert verdict.mode is GateMode.BASELINE
    assert verdict.expected == pytest.approx(487.09 * 400 / 750)
    assert (
        verdict.extrapolated
        and "nearest published all_reduce is on 2 nodes, this run on 4" in verdict.extrapolated
    )
    bandwidth = next(c for c in verdict.checks if c.name == "bandwidth")
    assert "extrapolated" in bandwidth.message


def test_the_vendors_own_tiers_are_used_where_published():
    # ND H100 v5: Microsoft's expected 450, warn below 400, drain below 300 (2 nodes).
    config = GateConfig(instance_type="Standard_ND96isr_H100_v5", nodes=2, collective="all_reduce")
    verdict = judge(_test("15"), config, CATALOG)  # an all_reduce row shape: 357.46 GB/s at 16 GiB
    assert (verdict.expected, verdict.threshold, verdict.drain_below) == (450, 400, 300)
    assert verdict.measured_busbw == 357.46 and verdict.tier is WARN  # between 300 and 400


# ---- three tiers --------------------------------------------------------------------------------------


def _site(busbw: float) -> dict[str, SiteBaseline]:
    return {"reduce_scatter": SiteBaseline(busbw, 8 << 30, 3, "three runs here")}


@pytest.mark.parametrize(
    ("expected", "tier"),
    [(380.0, PASS), (420.0, WARN), (600.0, FAIL)],  # pass at 0.9 x E; drain below 0.67 x E
)
def test_three_tiers_on_a_real_log(expected, tier):
    verdict = judge(_test("06"), GateConfig(site_baselines=_site(expected)), CATALOG)
    assert verdict.mode is GateMode.LEDGER and verdict.measured_busbw == 362.55
    assert verdict.tier is tier and verdict.passed is (tier is PASS)
    assert verdict.to_json()["tier"] == tier.value
    assert verdict.summary.startswith(tier.value.upper())


def test_a_transport_failure_is_the_first_line_of_the_verdict():
    test = _test("10")  # EKS, Socket transport lines
    verdict = judge(
        test, GateConfig(fabric=FabricKind.EFA, collective="all_reduce", min_busbw={"all_reduce": 1e5})
    )
    assert verdict.why.startswith("WRONG TRANSPORT"), verdict.why
    assert verdict.to_json()["transport"] == {"used": test.transport, "expected": "OFI"}


def test_drain_fraction_must_sit_below_the_margin():
    from pydantic import ValidationError

    from gpufleet.spec.model import ValidationSpec

    with pytest.raises(
        ValidationError, match=r"drain_fraction \(0.95\) must be below baseline_margin \(0.9\)"
    ):
        ValidationSpec(drain_fraction=0.95)


# ---- the suite: WARN re-runs once; the ledger ----------------------------------------------------------


class FlakySlurm(FakeSlurm):
    """Each collective run takes the next busbw scale (the last one repeats)."""

    def __init__(self, nodes: list[str], scales: list[float], **kwargs) -> None:
        super().__init__(nodes, **kwargs)
        self.scales = list(scales)

    def _collective(self, nodes, tasks_per_node, task, env):
        self.busbw_scale = self.scales.pop(0) if len(self.scales) > 1 else self.scales[0]
        return super()._collective(nodes, tasks_per_node, task, env)


def _healthy_figure(tmp_path: Path) -> float:
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "false"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    result = run_suite(spec, inventory, FakeSlurm([h.name for h in inventory.compute]), tmp_path / "healthy")
    (verdict,) = result.verdicts
    assert verdict.measured_busbw is not None
    return verdict.measured_busbw


def _spec_with_floor(floor: float):
    text = (GPU_SPEC % {"count": 4, "drain": "false"}).replace(
        "min_busbw: {all_reduce: 20}", f"min_busbw: {{all_reduce: {floor}}}"
    )
    return parse_spec(text)


@pytest.mark.parametrize(
    ("scales", "passed", "runs"),
    [([0.85, 1.0], True, 2), ([0.85, 0.85], False, 2), ([0.4], False, 1)],
    ids=["warn-then-pass", "warn-twice-fails", "below-drain-fails-at-once"],
)
def test_a_warn_is_re_run_once_and_the_re_run_decides(tmp_path, scales, passed, runs):
    healthy = _healthy_figure(tmp_path)
    spec = _spec_with_floor(round(healthy * 0.95, 3))  # 0.85 x healthy warns: below 0.95, above 0.707
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FlakySlurm([h.name for h in inventory.compute], scales)
    result = run_suite(spec, inventory, slurm, tmp_path / "run")
    assert result.passed is passed, result.summary
    cluster_wide = [run for run in slurm.collective_runs if len(run[1]) == 4]
    assert len(cluster_wide) == runs
    (verdict,) = result.verdicts
    if runs == 2:
        assert verdict.rerun_of is not None and verdict.rerun_of["tier"] == "warn"
        assert (tmp_path / "run" / "logs" / "all_reduce-rerun.log").exists()
        document = json.loads((tmp_path / "run" / "validation-report.json").read_text())
        assert document["tests"][0]["verdict"]["rerun_of"]["log"] == "logs/all_reduce.log"
    if not passed and runs == 2:
        assert "below the pass threshold twice" in verdict.why
    if runs == 1:
        assert verdict.tier is FAIL and "below the drain floor" in verdict.why


def test_the_ledger_keeps_every_run_and_gates_the_next_on_the_site_baseline(tmp_path):
    path = tmp_path / "state" / "ledger.jsonl"
    text = (GPU_SPEC % {"count": 4, "drain": "false"}).replace("  min_busbw: {all_reduce: 20}\n", "")
    spec = parse_spec(text)
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    nodes = [h.name for h in inventory.compute]
    first = run_suite(spec, inventory, FakeSlurm(nodes), tmp_path / "one", ledger=path)
    assert (
        first.passed and first.verdicts[0].mode is GateMode.CORRECTNESS_ONLY
    )  # hgx-h100: not in the catalog
    (entry,) = ledger.read(path)
    assert (entry.instance_type, entry.nodes, entry.collective, entry.tier) == (
        "hgx-h100",
        4,
        "all_reduce",
        "pass",
    )
    assert entry.busbw == first.verdicts[0].measured_busbw and entry.transport == "IB"
    assert entry.hosts == tuple(nodes)

    # The second run gates on the first: the site baseline; a run at half the figure fails.
    ledger_spec = parse_spec(
        text.replace("  find_bad_nodes: true\n", "  find_bad_nodes: false\n  baseline: ledger\n")
    )
    second = run_suite(ledger_spec, inventory, FakeSlurm(nodes), tmp_path / "two", ledger=path)
    assert second.passed and second.verdicts[0].mode is GateMode.LEDGER
    assert (
        "site baseline" in second.verdicts[0].why and "median of 1 passing run(s)" in second.verdicts[0].why
    )
    slow = run_suite(
        ledger_spec, inventory, FakeSlurm(nodes, busbw_scale=0.5), tmp_path / "three", ledger=path
    )
    assert not slow.passed and slow.verdicts[0].tier is FAIL
    entries = ledger.read(path)
    assert [e.tier for e in entries] == ["pass", "pass", "fail"]
    (derived,) = ledger.site_baselines(entries)
    assert derived.runs == 2 and derived.busbw == entry.busbw  # only passing runs count


def test_a_broken_ledger_line_is_named(tmp_path):
    from gpufleet.errors import StateError

    path = tmp_path / "ledger.jsonl"
    path.write_text('{"cluster": "a", "tier": "pass"}\n{not json\n')
    with pytest.raises(StateError, match=r"ledger.jsonl line 2 is not JSON"):
        ledger.read(path)


# ---- the NCCL environment lint -----------------------------------------------------------------------


def test_every_lint_rule_names_its_source():
    assert all(rule.source and rule.why and rule.effect in ("no-op", "harmful") for rule in RULES)


def test_the_lint_flags_tuner_overrides_and_no_ops_on_efa_only():
    env = {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring", "NCCL_COLLNET_ENABLE": "1", "FI_PROVIDER": "efa"}
    found = {f.variable: f for f in lint(FabricKind.EFA, env, "test")}
    assert set(found) == {"NCCL_PROTO", "NCCL_ALGO", "NCCL_COLLNET_ENABLE"}
    assert found["NCCL_COLLNET_ENABLE"].rule.effect == "no-op"
    assert "README-gb200.md" in found["NCCL_ALGO"].message
    # On InfiniBand CollNet is SHARP, and on TCPX Google's own settings pin the algorithm: not flagged.
    assert lint(FabricKind.INFINIBAND, {"NCCL_COLLNET_ENABLE": "1"}, "test") == []
    assert lint(FabricKind.TCPX, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}, "test") == []
    assert [f.variable for f in lint(FabricKind.ROCE, {"NCCL_IB_DISABLE": "1"}, "t")] == ["NCCL_IB_DISABLE"]
    assert lint(FabricKind.INFINIBAND, {"NCCL_IB_DISABLE": "0"}, "t") == []
    assert [f.variable for f in lint(FabricKind.EFA, {"NCCL_NET": "Socket"}, "t")] == ["NCCL_NET"]


@pytest.mark.parametrize("fabric", ["efa", "infiniband", "roce", "ethernet"])
def test_gpufleets_own_fabric_roles_pass_the_lint(fabric):
    from gpufleet.configure.nccl_env import render

    rendered = render(fabric, {"gpufleet_nccl_env": {}}, hostname="n0", path="/etc/gpufleet/nccl.env")
    assert lint(FabricKind(fabric), rendered.settings, "roles") == []


def test_check_warns_on_an_inventory_override_that_the_lint_flags(tmp_path):
    import yaml

    from gpufleet.preflight import run_checks

    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {"gpufleet_nccl_env": {"NCCL_IB_DISABLE": "1"}}}}))
    spec = parse_spec(
        f"""
name: ib
provider: {{kind: baremetal, inventory: {inventory}}}
node_groups:
  - {{name: head, roles: [controller, login], instance_type: dgx-h100}}
  - {{name: gpu, roles: [compute], instance_type: dgx-h100, count: 2}}
fabric: infiniband
"""
    )
    found = [f for f in run_checks(spec) if f.check == "nccl_env_lint"]
    assert [f.path for f in found] == ["gpufleet_nccl_env.NCCL_IB_DISABLE"]
    assert found[0].level.value == "warning" and "falls back to TCP" in found[0].message


# ---- ready before measured -----------------------------------------------------------------------------


class LateSlurm(FakeSlurm):
    """A node of ``broken`` reports its overrides for its first ``polls[node]`` health runs, then is ready;
    every node has the 8 ACTIVE InfiniBand ports the inventory expects."""

    READY: ClassVar[dict] = {
        "fabric": {"kind": "infiniband", "devices": 8, "method": "/sys/class/infiniband ports ACTIVE"}
    }

    def __init__(self, nodes: list[str], polls: dict[str, int], broken: dict[str, dict], **kwargs) -> None:
        super().__init__(nodes, **kwargs)
        self.polls, self.broken = dict(polls), broken
        self.health_runs: list[list[str]] = []

    def _health(self, nodes, task):
        self.health_runs.append(list(nodes))
        assert "--env-file" in task and task[task.index("--env-file") + 1] == "/etc/gpufleet/nccl.env"
        for node in nodes:
            late = self.polls.get(node, 0) > 0
            self.health[node] = {**self.READY, **(self.broken.get(node, {}) if late else {})}
            self.polls[node] = self.polls.get(node, 0) - 1
        return super()._health(nodes, task)


def _ready_inventory():
    inventory = _inventory(3, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    hosts = [
        h.model_copy(update={"fabric_interfaces": 8}) if h.name.startswith("gpu") else h
        for h in inventory.hosts
    ]
    return inventory.model_copy(update={"hosts": hosts})


NOT_READY = {
    "missing-device": {
        "fabric": {"kind": "infiniband", "devices": 7, "method": "/sys/class/infiniband ports ACTIVE"}
    },
    "link-down": {
        "fabric": {"kind": "infiniband", "devices": 0, "method": "/sys/class/infiniband ports ACTIVE"}
    },
    "env-file-removed": {"nccl_env": {"path": "/etc/gpufleet/nccl.env", "present": False}},
}


@pytest.mark.parametrize("problem", sorted(NOT_READY))
def test_a_node_not_ready_by_the_deadline_is_named_and_not_benchmarked(tmp_path, problem):
    spec = parse_spec((GPU_SPEC % {"count": 3, "drain": "false"}) + "  ready_timeout: 1m\n")
    inventory = _ready_inventory()
    slurm = LateSlurm([h.name for h in inventory.compute], {"gpu-001": 99}, {"gpu-001": NOT_READY[problem]})
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed and result.nodes == ["gpu-000", "gpu-002"]
    # polled every 10 s for a minute: the first run on all, then only the node that is not ready
    assert slurm.health_runs[0] == ["gpu-000", "gpu-001", "gpu-002"]
    assert set(map(tuple, slurm.health_runs[1:])) == {("gpu-001",)} and len(slurm.health_runs) == 7
    assert all("gpu-001" not in nodes for _, nodes, _ in slurm.collective_runs)
    (node,) = [n for n in result.health.nodes if not n.passed]
    assert node.node == "gpu-001"
    assert node.problems[0].startswith("not ready after 1m (validation.ready_timeout): ")
    assert "nothing was benchmarked on it" in node.problems[0]
    if problem == "env-file-removed":
        assert "/etc/gpufleet/nccl.env is missing or empty" in node.problems[0]
    else:
        assert "7 infiniband devices" in node.problems[0] or "0 infiniband devices" in node.problems[0]


def test_a_node_ready_late_is_not_failed(tmp_path):
    spec = parse_spec((GPU_SPEC % {"count": 3, "drain": "false"}) + "  ready_timeout: 1m\n")
    inventory = _ready_inventory()
    slurm = LateSlurm(
        [h.name for h in inventory.compute], {"gpu-001": 2}, {"gpu-001": NOT_READY["link-down"]}
    )
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert result.passed, result.summary
    assert result.nodes == ["gpu-000", "gpu-001", "gpu-002"]
    node = next(n for n in result.health.nodes if n.node == "gpu-001")
    assert node.passed and node.checks[0].name == "ready" and node.checks[0].message == "ready after 20 s"
    assert len(slurm.health_runs) == 3


def test_the_node_script_reports_the_env_file_and_gpudirect(tmp_path):
    from gpufleet.node import node_health

    env = tmp_path / "nccl.env"
    assert node_health.nccl_env(str(env)) == {"path": str(env), "present": False}
    env.write_text("export NCCL_NET=IB\n")
    assert node_health.nccl_env(str(env))["present"] is True
    raw = {"nccl_env": {"path": str(env), "present": False}, "gpudirect": {"nvidia_peermem": False}}
    checks = {name: status for name, status, _ in node_health.judge(raw, {"gpus": 8, "gpudirect_rdma": True})}
    assert checks["nccl_env"] == "fail" and checks["gpudirect"] == "warn"
    assert "gpudirect" not in {name for name, _, _ in node_health.judge(raw, {"gpus": 8})}


# ---- the console ---------------------------------------------------------------------------------------


def _console_of(result, spec, *, verbose: bool) -> str:
    from rich.console import Console

    from gpufleet.cli import common
    from gpufleet.cli import validate as validate_cmd

    recorder = Console(width=80, record=True, highlight=False, file=io.StringIO())
    original = validate_cmd.console
    validate_cmd.console = recorder
    try:
        validate_cmd.render_validation(spec, result, json_out=False, verbose=verbose)
    finally:
        validate_cmd.console = original
    assert common.console is not recorder
    return recorder.export_text()


def test_the_console_shows_the_failing_node_first_then_the_verdicts_in_80_columns(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "true"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-002": "slow"})
    result = run_suite(spec, inventory, slurm, tmp_path)
    text = _console_of(result, spec, verbose=False)
    lines = text.splitlines()
    assert lines[0].startswith("FAIL gpu-002: failed"), text
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table), text
    header = next(line for line in lines if "collective" in line and "verdict" in line)
    for column in ("measured", "expected", "bound", "why"):
        assert column in header, header
    assert any("all_reduce" in line and "FAIL" in line for line in lines), text
    assert "all_reduce_perf" not in text and "#  size" not in text  # the raw run stays in logs/
    assert "--verbose prints them" in text
    verbose = _console_of(result, spec, verbose=True)
    assert "all_reduce_perf" in verbose
