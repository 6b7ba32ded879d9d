"""Validation releases nodes (validate/release.py): compute nodes registered drained "gpufleet: not validated"
(roles/slurm, dynamic nodes) are reserved for the run, resumed, validated with every job in the reservation,
and only those that passed are let go; the others stay drained with the failing check as the reason. Against
the fake Slurm login node (validate_fakes.FakeSlurm), which refuses an srun onto a drained node or onto a
reserved node without the reservation, as Slurm does."""

from __future__ import annotations

import json
import shlex

import pytest
from test_validation_suite import GPU_SPEC, LOCAL_SPEC, _inventory
from validate_fakes import FakeSlurm

from gpufleet.errors import ValidationRunError
from gpufleet.spec import parse_spec
from gpufleet.spec.model import FabricKind
from gpufleet.validate import release as release_module
from gpufleet.validate.release import UNVALIDATED, held_nodes, reservation_name
from gpufleet.validate.report import JSON_NAME
from gpufleet.validate.slurm import SlurmState
from gpufleet.validate.suite import run_suite

LOCAL_FIELDS = {"nccl_tests_dir": "/opt/gpufleet/mpi-perf/bin", "nccl_env_file": "/etc/gpufleet/nccl.env"}


def _local(**fake: object) -> tuple[object, object, FakeSlurm]:
    spec = parse_spec(LOCAL_SPEC)
    inventory = _inventory(3, gpus=0, fabric=FabricKind.ETHERNET, **LOCAL_FIELDS)
    env = {h.name: {"NCCL_SOCKET_IFNAME": "eth0"} for h in inventory.compute}
    slurm = FakeSlurm(
        [h.name for h in inventory.compute], gpus=0, fabric="ethernet", busbw_scale=0.01, node_env=env, **fake
    )
    return spec, inventory, slurm


def _scontrol(slurm: FakeSlurm) -> list[list[str]]:
    return [shlex.split(c)[1:4] for c in slurm.commands if c.startswith("scontrol")]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_module, "_sleep", lambda seconds: None)


UNVALIDATED_NODES = {f"gpu-00{i}": UNVALIDATED for i in range(3)}


def test_nodes_registered_drained_are_validated_in_a_reservation_and_released(tmp_path) -> None:
    spec, inventory, slurm = _local(drained=dict(UNVALIDATED_NODES))
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert result.passed, result.summary
    # Every job of the run asked for the reservation: none was refused (an srun onto a drained node, or onto
    # a reserved one without it, fails as in Slurm).
    assert slurm.refused == []
    sruns = [c for c in slurm.commands if c.startswith("srun")]
    assert sruns and all(f"--reservation={reservation_name('t')}" in c for c in sruns), sruns
    # Slurm 24.11 reads a resumed node not responding until it registers again: the run waited for that
    # (without the wait, its health check took both nodes for unusable: the cluster run of 2026-11-27 20:06)
    assert slurm.registering == set()
    # reserved before resumed, the reservation gone at the end, and no node drained
    steps = _scontrol(slurm)
    assert steps[0][:2] == ["delete", "reservation=gpufleet-validate-t"]  # one a killed run left
    assert steps[1][:2] == ["create", "reservation"]
    assert steps[2] == ["update", "nodename=gpu-000,gpu-001,gpu-002", "state=resume"]
    assert steps[-1] == ["delete", "reservation=gpufleet-validate-t"]
    assert slurm.reservation is None and slurm.drained == {}
    context = json.loads((tmp_path / JSON_NAME).read_text())["context"]
    assert "released: gpu-000, gpu-001, gpu-002; kept drained: none" in context["held for validation"]


def test_without_the_reservation_the_drained_nodes_take_no_job(tmp_path, monkeypatch) -> None:
    """The check behind the test above: with hold() made a no-op, the same run finds no usable node."""
    monkeypatch.setattr(
        "gpufleet.validate.suite.hold", lambda runner, nodes, cluster: release_module.Hold(runner)
    )
    spec, inventory, slurm = _local(drained=dict(UNVALIDATED_NODES))
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed
    assert set(slurm.drained) == set(UNVALIDATED_NODES)


def test_a_held_node_that_fails_stays_drained_with_the_failing_check(tmp_path) -> None:
    """drain_bad_nodes off: nodes in service would stay as they are, but a held node never goes free
    without passing; the bisection clears the others, which are released."""
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "false"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    held = {f"gpu-00{i}": UNVALIDATED for i in range(4)}
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-002": "slow"}, drained=held)
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed and result.bisection is not None
    assert list(result.bisection.bad_nodes) == ["gpu-002"]
    assert result.drained == []  # drain_bad_nodes is off
    assert list(slurm.drained) == ["gpu-002"], slurm.drained
    assert slurm.drained["gpu-002"].startswith("gpufleet all_reduce: "), slurm.drained
    assert slurm.reservation is None and slurm.refused == []


def test_a_node_in_service_that_fails_is_left_to_drain_bad_nodes(tmp_path) -> None:
    """Only held nodes are kept back: one node held, the rest in service; the failed run names no node
    (no bisection), so the held one stays drained, said why, and the others stay in service."""
    spec = parse_spec(
        LOCAL_SPEC.replace(
            "min_busbw: {all_reduce: 0.05, all_gather: 0.05}",
            "min_busbw: {all_reduce: 9000, all_gather: 9000}\n  find_bad_nodes: false",
        )
    )
    inventory = _inventory(3, gpus=0, fabric=FabricKind.ETHERNET, **LOCAL_FIELDS)
    env = {h.name: {"NCCL_SOCKET_IFNAME": "eth0"} for h in inventory.compute}
    slurm = FakeSlurm(
        [h.name for h in inventory.compute],
        gpus=0,
        fabric="ethernet",
        busbw_scale=0.01,
        node_env=env,
        drained={"gpu-001": "gpufleet health: /shared is not mounted"},
    )
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed
    assert list(slurm.drained) == ["gpu-001"]
    assert slurm.drained["gpu-001"] == f"{UNVALIDATED} (all_reduce failed its gate (fail))"
    assert slurm.reservation is None


def test_no_held_node_no_reservation(tmp_path) -> None:
    spec, inventory, slurm = _local(drained={"gpu-001": "SlurmdSpoolDir is full"})  # not gpufleet's drain
    run_suite(spec, inventory, slurm, tmp_path)
    assert not any("reservation" in c for c in slurm.commands)
    assert slurm.drained == {"gpu-001": "SlurmdSpoolDir is full"}


def test_a_refused_reservation_resumes_nothing_and_says_how_to_fix_it(tmp_path) -> None:
    spec, inventory, slurm = _local(drained=dict(UNVALIDATED_NODES), reservation_rc=1)
    with pytest.raises(ValidationRunError) as caught:
        run_suite(spec, inventory, slurm, tmp_path)
    assert "refused the reservation" in str(caught.value) and "Invalid user id" in str(caught.value)
    assert "Slurm administrator" in (caught.value.hint or "")
    assert slurm.drained == UNVALIDATED_NODES
    assert not any("state=resume" in c for c in slurm.commands)


def test_an_interrupted_run_drains_the_held_nodes_again_and_deletes_the_reservation(
    tmp_path, monkeypatch
) -> None:
    spec, inventory, slurm = _local(drained=dict(UNVALIDATED_NODES))

    def interrupted(plan: object, nodes: list[str]) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr("gpufleet.validate.suite.run_collectives", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_suite(spec, inventory, slurm, tmp_path)
    assert slurm.drained == UNVALIDATED_NODES and slurm.reservation is None


def test_held_nodes_are_drained_answering_nodes_with_a_reason_of_gpufleets() -> None:
    states = {
        "a": SlurmState("a", "drained", UNVALIDATED),
        "b": SlurmState("b", "draining", "gpufleet all_reduce: slow"),
        "c": SlurmState("c", "drained*", UNVALIDATED),  # not answering: resuming it would not help
        "d": SlurmState("d", "drained", "SlurmdSpoolDir is full"),  # an administrator's
        "e": SlurmState("e", "idle", "none"),
    }
    assert held_nodes(states) == {"a": UNVALIDATED, "b": "gpufleet all_reduce: slow"}
    # a node idle in validation's maintenance reservation takes the run's jobs
    assert SlurmState("x", "maint", "none").usable and SlurmState("x", "reserved", "none").usable


def test_on_a_cloud_image_the_slurm_updates_run_through_sudo(tmp_path) -> None:
    """AWS/GCP: validation logs in as the image's user (ubuntu), not root; Slurm refuses its scontrol update
    and reservation (proc_req.c: validate_super_user, validate_operator), so each runs through sudo -n.
    Before the fix every held node stayed drained and the run found none usable."""
    spec, inventory, slurm = _local(drained=dict(UNVALIDATED_NODES), user="ubuntu")
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert result.passed, result.summary
    assert slurm.reservation is None and slurm.drained == {}
    scontrols = [c for c in slurm.commands if "scontrol" in c.split()[:3]]
    assert scontrols and all(c.startswith("sudo -n scontrol ") for c in scontrols), scontrols
    assert "users=ubuntu" in next(c for c in scontrols if "create reservation" in c)


def test_on_a_cloud_image_a_bad_node_in_service_is_drained_through_sudo(tmp_path) -> None:
    spec = parse_spec(GPU_SPEC % {"count": 4, "drain": "true"})
    inventory = _inventory(4, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8, bad={"gpu-002": "slow"}, user="ubuntu")
    result = run_suite(spec, inventory, slurm, tmp_path)
    assert not result.passed and result.drained == ["gpu-002"]
    assert list(slurm.drained) == ["gpu-002"]
    assert any(c.startswith("sudo -n scontrol update nodename=gpu-002 state=drain") for c in slurm.commands)
