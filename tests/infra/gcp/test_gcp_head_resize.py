"""A head resize (what ``gpufleet check``'s head_size warning recommends) never leaves a stopped controller
(GCP audit 2026-11-27 H2).

The provider's update of a machine type, as terraform-provider-google e03b7622 writes it
(google/services/compute/resource_compute_instance.go, read 2026-11-27): ``needToStopInstanceBeforeUpdating``
holds for a ``machine_type`` change (:3438); a RUNNING VM is refused unless ``allow_stopping_for_update``
(:3513-3518); a VM not already TERMINATED is stopped (:3520-3540); ``setMachineType`` (:3572-3599); then
the VM is started only when it was RUNNING before the update and ``desired_status`` is not TERMINATED, or it
was TERMINATED and ``desired_status`` is RUNNING (:3783-3800). An error returns at once, where the VM is.
``provider_resize`` replays exactly that, each call checked against the shipped deployer role, with the
head VM's own inputs from the offline plan of the example. Failed on main at bc3d77c: the role had no
``compute.instances.setMachineType`` nor ``start`` (the head stopped and stayed stopped), and the VMs no
``desired_status``, so even a later successful up did not start a head a failed one had stopped.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.plan import run_offline
from gpufleet.infra.program import cluster_program
from gpufleet.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
ROLE = set(
    yaml.safe_load((ROOT / "examples" / "ci" / "gcp" / "deployer-role.yaml").read_text(encoding="utf-8"))[
        "includedPermissions"
    ]
)
INSTANCE = "gcp:compute/instance:Instance"


class Denied(Exception):
    pass


def provider_resize(
    status: str, inputs: dict[str, Any], allowed: set[str], *, unavailable: bool = False
) -> tuple[str, list[str]]:
    """The VM's status after the provider's machine-type update (see the module doc), and its calls.
    ``unavailable``: setMachineType fails for a reason of the cloud's (the type not offered in the zone)."""
    desired = inputs.get("desiredStatus") or ""
    calls: list[str] = []

    def call(permission: str) -> None:
        calls.append(permission)
        if permission not in allowed:
            raise Denied(permission)

    before = status
    if before == "RUNNING" and desired != "TERMINATED" and not inputs.get("allowStoppingForUpdate"):
        return status, calls  # refused before anything is done
    try:
        if before != "TERMINATED":
            call("compute.instances.stop")
            status = "TERMINATED"
        call("compute.instances.setMachineType")
        if unavailable:
            return status, calls
        if (before == "RUNNING" and desired != "TERMINATED") or (
            before == "TERMINATED" and desired == "RUNNING"
        ):
            call("compute.instances.start")
            status = "RUNNING"
    except Denied:
        pass
    return status, calls


@pytest.fixture(scope="module")
def head() -> dict[str, Any]:
    spec = load_spec(ROOT / "examples" / "gcp-a3-mega.yaml")
    created = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    plan = run_offline(lambda: cluster_program(spec, created), GcpMockCloud(spec), stack=spec.name)
    (vm,) = [r for r in plan.of_type(INSTANCE) if r.name == spec.host_names(spec.controller_group)[0]]
    return vm.inputs


def test_a_head_resize_under_the_shipped_role_ends_with_the_controller_running(head):
    status, calls = provider_resize("RUNNING", head, ROLE)
    assert status == "RUNNING", f"the controller is left {status} after {calls}"
    assert calls == ["compute.instances.stop", "compute.instances.setMachineType", "compute.instances.start"]


def test_a_resize_that_failed_half_way_is_started_by_the_next_up(head):
    """The cloud refuses the new type (not offered in the zone): the VM is stopped and the up fails; the
    user fixes the spec and runs up again. The retry finds the VM TERMINATED: only ``desired_status:
    RUNNING`` makes the provider start it."""
    status, _ = provider_resize("RUNNING", head, ROLE, unavailable=True)
    assert status == "TERMINATED"
    status, calls = provider_resize(status, head, ROLE)
    assert status == "RUNNING", f"the retry left the controller {status} after {calls}"
    assert head.get("desiredStatus") == "RUNNING" and head.get("allowStoppingForUpdate") is True, head
