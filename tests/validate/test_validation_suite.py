"""The whole suite against a fake Slurm login node: health, collectives, gate, report, bisection, drain."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from validate_fakes import FakeSlurm

from factories import HEAD_ROLES, make_host, make_inventory
from gpufleet.errors import ValidationRunError
from gpufleet.spec import parse_spec
from gpufleet.spec.model import FabricKind
from gpufleet.validate.report import JSON_NAME, MARKDOWN_NAME, PLOT_NAME
from gpufleet.validate.suite import run_suite

LOCAL_SPEC = """
name: demo
provider: local
node_groups:
  - {name: controller, roles: [controller, login], instance_type: local}
  - {name: compute, roles: [compute], instance_type: local, count: 3}
validation:
  collectives: [all_reduce, all_gather]
  min_bytes: 8
  max_bytes: 16M
  gate_min_bytes: 4M
  iterations: 10
  warmup_iterations: 2
  min_busbw: {all_reduce: 0.05, all_gather: 0.05}
"""

GPU_SPEC = """
name: ib
provider: {kind: baremetal, inventory: inventories/ib.yml}
node_groups:
  - {name: head, roles: [controller, login], instance_type: head}
  - {name: gpu, roles: [compute], instance_type: hgx-h100, count: %(count)d}
fabric: infiniband
validation:
  collectives: [all_reduce]
  min_bytes: 1M
  max_bytes: 8G
  min_busbw: {all_reduce: 20}
  find_bad_nodes: true
  drain_bad_nodes: %(drain)s
"""


def _inventory(count: int, *, gpus: int, fabric: FabricKind, kind: str = "local", **fields: Any):
    hosts = [make_host("head", HEAD_ROLES, instance_type="head", cpus=4, memory_mb=4096)]
    hosts += [
        make_host(
            f"gpu-{index:03d}",
            ip=f"10.0.1.{index}",
            instance_type=kind,
            gpus=gpus,
            fabric_interfaces=0,
            cpus=96,
            memory_mb=1_000_000,
        )
        for index in range(count)
    ]
    return make_inventory(hosts, cluster="t", provider="baremetal", fabric=fabric, **fields)


def test_local_cluster_passes_and_writes_the_report(tmp_path):
    spec = parse_spec(LOCAL_SPEC)
    inventory = _inventory(
        3,
        gpus=0,
        fabric=FabricKind.ETHERNET,
        nccl_tests_dir="/opt/gpufleet/mpi-perf/bin",
        nccl_env_file="/etc/gpufleet/nccl.env",
    )
    node_env = {h.name: {"NCCL_SOCKET_IFNAME": "eth0"} for h in inventory.compute}
    slurm = FakeSlurm(
        [h.name for h in inventory.compute], gpus=0, fabric="ethernet", busbw_scale=0.01, node_env=node_env
    )
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert result.passed, result.summary
    assert [v.collective for v in result.verdicts] == ["all_reduce", "all_gather"]
    assert all(v.mode == "floor" and v.measured_bytes == 16 << 20 for v in result.verdicts)
    assert result.health is not None and result.health.passed
    assert result.bisection is None and result.drained == []
    kinds = [shlex.split(c)[0] for c in slurm.commands]
    # node states, health, the two collectives, then the node states again (did Slurm take one out?)
    assert kinds == ["sinfo", "srun", "srun", "srun", "sinfo"]
    collective, nodes, env = slurm.collective_runs[0]
    assert (collective, nodes) == ("all_reduce", ["gpu-000", "gpu-001", "gpu-002"])
    # the tasks ran in the nodes' env file (written by the ethernet role) plus gpufleet's debug level
    assert env["NCCL_SOCKET_IFNAME"] == "eth0" and env["NCCL_DEBUG"] == "INFO"
    assert all(". /etc/gpufleet/nccl.env" in command for command in slurm.commands[2:4])
    assert (
        "/opt/gpufleet/mpi-perf/bin/all_reduce_perf -b 8 -e 16777216 -f 2 -g 1 -n 10 -w 2 -c 1"
        in (slurm.commands[2])
    )
    for name in (JSON_NAME, MARKDOWN_NAME, PLOT_NAME, "logs/all_reduce.log", "logs/all_gather.log"):
        assert (tmp_path / name).exists(), name
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["passed"] is True and document["health"]["passed"] is True
    assert document["context"]["nodes in the collective runs"] == 3
    assert "## Node health" in (tmp_path / MARKDOWN_NAME).read_text()


def test_the_report_is_written_once_with_the_bisection_and_the_drain(tmp_path, monkeypatch):
    """One write at the end (issue 30): the bisection and the drain are in the one report the suite writes."""
    import gpufleet.validate.suite as suite

    written = []
    real = suite.write_report

    def counting(out_dir, tests, verdicts, **kwargs):
        written.append(sorted((kwargs.get("sections") or {}).keys()))
        return real(out_dir, tests, verdicts, **kwargs)

    monkeypatch.setattr(suite, "write_report", counting)
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "true"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-002": "slow"})
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert written == [["bisection", "health"]], written
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["context"]["drained"] == "gpu-002" and document["context"]["scheduler"] == "slurm"
    assert result.drained == ["gpu-002"]


def test_slow_node_is_found_and_drained(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 16, "drain": "true"})
    inventory = _inventory(16, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-011": "slow"})
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed
    (verdict,) = result.verdicts
    assert "below the floor 20" in verdict.summary
    assert result.bisection is not None and list(result.bisection.bad_nodes) == ["gpu-011"]
    assert result.bisection.round_count <= 5  # ceil(log2 16) + 1
    assert slurm.drained == {"gpu-011": slurm.drained["gpu-011"]}
    assert slurm.drained["gpu-011"].startswith("gpufleet all_reduce: failed together with proven-good")
    assert result.drained == ["gpu-011"]
    # the cluster-wide run used one task per GPU, GPUs requested, the IB environment
    command = next(c for c in slurm.commands if "all_reduce_perf -b" in c and "-N 16" in c)
    assert "--ntasks-per-node=8 --gpus-per-node=8" in command and "NCCL_DEBUG_SUBSYS=INIT,NET" in command
    markdown = (tmp_path / MARKDOWN_NAME).read_text()
    assert "## Bad nodes (bisection)" in markdown and "- **gpu-011**:" in markdown
    assert "drained in Slurm: gpu-011" in markdown
    assert json.loads((tmp_path / JSON_NAME).read_text())["bisection"]["bad_nodes"].keys() == {"gpu-011"}
    assert "bad nodes: gpu-011" in result.summary


def test_bad_nodes_are_named_but_not_drained_unless_asked(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 9, "drain": "false"})
    inventory = _inventory(9, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm(
        [h.name for h in inventory.compute], gpus=8, bad={"gpu-004": "wrong", "gpu-008": "crash"}
    )
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed
    assert set(result.bisection.bad_nodes) == {"gpu-004", "gpu-008"}
    assert slurm.drained == {} and result.drained == []


def test_socket_fallback_on_an_infiniband_cluster_fails_loudly(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "false"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-002": "socket"})
    result = run_suite(spec, inventory, slurm, tmp_path)
    (verdict,) = result.verdicts
    assert not verdict.passed
    assert verdict.summary.startswith("FAIL all_reduce: WRONG TRANSPORT: NCCL used Socket, but the fabric is")
    assert list(result.bisection.bad_nodes) == ["gpu-002"]


def test_unhealthy_and_down_nodes(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "true"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    health = {
        "gpu-001": {"gpus": {"present": True, "count": 7}},
        "gpu-002": {"ecc": {"present": True, "uncorrected": 3, "per_gpu": [{"gpu": "5", "uncorrected": 3}]}},
    }
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, health=health, down={"gpu-003"})
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed
    assert result.health.failed_nodes == ["gpu-001", "gpu-002", "gpu-003"]
    problems = {node.node: node.problems for node in result.health.nodes}
    # A GPU short is a node not ready (issue 33): polled until validation.ready_timeout, then named.
    assert problems["gpu-001"] == [
        "not ready after 5m (validation.ready_timeout): 7 GPUs visible, the inventory expects 8; nothing was "
        "benchmarked on it",
        "7 GPUs visible, the inventory expects 8",
    ]
    assert problems["gpu-002"] == ["3 uncorrected ECC errors (GPU 5)"]
    assert problems["gpu-003"] == ["Slurm state down* (Not responding): the node cannot run jobs"]
    # the down node and the one not ready are left out of the collective runs; the others still run (and pass)
    assert result.nodes == ["gpu-000", "gpu-002"]
    assert result.verdicts[0].passed
    assert set(slurm.drained) == {"gpu-001", "gpu-002", "gpu-003"}
    assert slurm.drained["gpu-002"] == "gpufleet health: 3 uncorrected ECC errors (GPU 5)"


def test_a_run_without_output_is_a_failed_verdict_not_a_crash(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 2, "drain": "false"})
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")

    class Broken(FakeSlurm):
        def _collective(self, nodes, tasks_per_node, task, env):
            return 2, "", "slurmstepd: error: execve(): /opt/nccl-tests/build/all_reduce_perf: No such file\n"

    result = run_suite(spec, inventory, Broken(["gpu-000", "gpu-001"], gpus=8), tmp_path)
    (verdict,) = result.verdicts
    assert not verdict.passed
    assert "srun exit code 2, no nccl-tests table in the output" in verdict.summary
    assert "No such file" in verdict.summary
    # every run failed, single-node ones too: a software fault, and no node is blamed for it
    assert result.bisection is not None and result.bisection.bad_nodes == {}
    assert result.bisection.widespread and result.bisection.unresolved == [["gpu-000", "gpu-001"]]


def test_a_hung_run_fails_its_verdict_and_the_suite_goes_on(tmp_path):
    spec = parse_spec(LOCAL_SPEC)
    inventory = _inventory(3, gpus=0, fabric=FabricKind.ETHERNET)

    class Hangs(FakeSlurm):
        def _collective(self, nodes, tasks_per_node, task, env):
            if task[0].endswith("all_reduce_perf"):
                raise ValidationRunError("'srun ...' on head did not finish within 1800 s")
            return super()._collective(nodes, tasks_per_node, task, env)

    slurm = Hangs([h.name for h in inventory.compute], gpus=0, fabric="ethernet", busbw_scale=0.01)
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert [v.passed for v in result.verdicts] == [False, True]
    assert (
        "srun exit code 124" in result.verdicts[0].summary and "did not finish" in result.verdicts[0].summary
    )
    assert (tmp_path / JSON_NAME).exists()


def test_heterogeneous_gpu_counts_are_refused(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 2, "drain": "false"})
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    inventory.hosts[-1].gpus = 4
    with pytest.raises(ValidationRunError, match=r"compute nodes differ in GPU count \(4, 8\)"):
        run_suite(spec, inventory, FakeSlurm(["gpu-000", "gpu-001"]), tmp_path)


# ---- the nodes' NCCL environment file ---------------------------------------------------------------


def _ib_suite(tmp_path, slurm_kwargs: dict, count: int = 4):
    spec = parse_spec(GPU_SPEC % {"count": count, "drain": "false"})
    inventory = _inventory(count, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, fabric="infiniband", **slurm_kwargs)
    return run_suite(spec, inventory, slurm, tmp_path), slurm


def test_a_node_without_its_env_file_fails_the_run_by_name(tmp_path):
    result, _slurm = _ib_suite(tmp_path, {"no_env_file": {"gpu-002"}})
    assert not result.passed
    messages = " | ".join(check.message for check in result.verdicts[0].failures)
    assert "no NCCL environment file on gpu-002 (/etc/gpufleet/nccl.env)" in messages, messages
    assert list(result.bisection.bad_nodes) == ["gpu-002"]


def test_the_gate_expects_the_transport_the_env_file_configured(tmp_path):
    # The role configured gIB-style transport on every node, but NCCL used IB verbs: a wrong transport,
    # although IB is a transport an InfiniBand cluster may use.
    node_env = {f"gpu-{i:03d}": {"GPUFLEET_TRANSPORT": "IBext"} for i in range(4)}
    result, _slurm = _ib_suite(tmp_path, {"node_env": node_env})
    assert not result.passed
    check = next(c for c in result.verdicts[0].checks if c.name == "transport")
    assert check.status == "fail" and "NCCL used IB" in check.message
    assert "IBext, as the nodes' NCCL environment file configured" in check.message, check.message


def test_an_env_file_written_for_another_fabric_fails(tmp_path):
    result, _slurm = _ib_suite(tmp_path, {"node_env": {"gpu-001": {"GPUFLEET_FABRIC": "ethernet"}}})
    assert not result.passed
    messages = " ".join(c.message for c in result.verdicts[0].failures)
    assert "written for another fabric than infiniband (gpu-001: ethernet)" in messages, messages


def test_the_configured_transport_passes_when_nccl_used_it(tmp_path):
    result, slurm = _ib_suite(tmp_path, {})
    assert result.passed, result.summary
    check = next(c for c in result.verdicts[0].checks if c.name == "transport")
    assert check.status == "pass" and "NCCL used IB" in check.message
    assert all(
        env["NCCL_DEBUG"] == "INFO" and env["GPUFLEET_TRANSPORT"] == "IB" for *_, env in slurm.collective_runs
    )


DRIVER = "Test CUDA failure util.cu:674 'CUDA driver version is insufficient for CUDA runtime version'"


def _smoke_failed(node: str) -> dict:
    return {
        "nccl_tests": {
            "present": True,
            "binary": "/opt/nccl-tests/build/all_reduce_perf",
            "exit": 1,
            "passed": False,
            "error": f"{node}: {DRIVER}",
        }
    }


def test_nodes_whose_nccl_tests_cannot_run_fail_health_and_sit_out_the_collectives(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 3, "drain": "false"})
    inventory = _inventory(3, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm(
        [h.name for h in inventory.compute], gpus=8, health={"gpu-001": _smoke_failed("gpu-001")}
    )
    result = run_suite(spec, inventory, slurm, tmp_path)
    health_command = next(c for c in slurm.commands if "python3" in c)
    assert "--nccl-tests /opt/nccl-tests/build" in health_command  # the inventory's GPU stack asks for it
    assert not result.passed and result.health.failed_nodes == ["gpu-001"]
    problems = {node.node: node.problems for node in result.health.nodes}
    assert problems["gpu-001"] == [
        f"nccl-tests all_reduce_perf cannot run one rank (exit 1): gpu-001: {DRIVER}"
    ]
    assert result.nodes == ["gpu-000", "gpu-002"]
    assert [nodes for _, nodes, _ in slurm.collective_runs] == [["gpu-000", "gpu-002"]]


def test_no_node_can_run_nccl_tests_is_a_verdict_not_a_crash(tmp_path):
    spec = parse_spec(GPU_SPEC % {"count": 2, "drain": "false"})
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    health = {name: _smoke_failed(name) for name in ("gpu-000", "gpu-001")}
    slurm = FakeSlurm(["gpu-000", "gpu-001"], gpus=8, health=health)
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed and result.health.failed_nodes == ["gpu-000", "gpu-001"]
    assert slurm.collective_runs == []  # nothing is launched on nodes that cannot run the binary
    assert "no usable compute node left after the health checks" in json.dumps(
        json.loads((tmp_path / JSON_NAME).read_text())["tests"]
    )
    assert DRIVER in (tmp_path / MARKDOWN_NAME).read_text()


def test_a_node_slurm_drains_during_the_run_is_reported_with_its_reason_and_the_resume_command(tmp_path):
    """Issue 38: a full disk left both compute nodes drained ('SlurmdSpoolDir is full') after validation, and
    nothing in its output said so. Here Slurm drains one node while the first collective runs."""

    class SpoolFills(FakeSlurm):
        def _collective(self, nodes, ranks, task, env):  # type: ignore[no-untyped-def]
            with self._lock:
                self.drained.setdefault("gpu-001", "SlurmdSpoolDir is full")
            return super()._collective(nodes, ranks, task, env)

    fake = SpoolFills([f"gpu-{i:03d}" for i in range(2)], gpus=8, fabric="infiniband")
    spec = parse_spec(GPU_SPEC % {"count": 2, "drain": "false"})
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    result = run_suite(spec, inventory, fake, tmp_path)
    assert not result.passed
    line = "Slurm took gpu-001 out during the run: drained (SlurmdSpoolDir is full); once its cause is "
    line += "fixed, return it with: scontrol update nodename=gpu-001 state=resume"
    assert result.taken_out is not None and result.taken_out.lines() == [line]
    assert line in result.summary
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["slurm_took_out"]["nodes"]["gpu-001"]["reason"] == "SlurmdSpoolDir is full"
    assert line in (tmp_path / MARKDOWN_NAME).read_text()


def test_nodes_gpufleet_drained_itself_are_not_reported_as_taken_out(tmp_path):
    fake = FakeSlurm([f"gpu-{i:03d}" for i in range(4)], gpus=8, fabric="infiniband", bad={"gpu-002": "slow"})
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "true"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    result = run_suite(spec, inventory, fake, tmp_path)
    assert "gpu-002" in fake.drained and result.taken_out is not None and result.taken_out.states == {}
