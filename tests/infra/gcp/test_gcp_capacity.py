"""How GCP VMs are bought: reservation-bound VMs, no on-demand A3 Ultra / A4, DWS flex-start."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from gcp_testlib import gcp_spec
from pydantic import ValidationError

from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, run_checks
from gpufleet.spec import ClusterSpec

INSTANCE = "gcp:compute/instance:Instance"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"


def _groups(instance_type: str, capacity: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
        {
            "name": "gpu",
            "roles": ["compute"],
            "instance_type": instance_type,
            "count": 2,
            "capacity": capacity,
        },
    ]


def _errors(spec: ClusterSpec) -> list[str]:
    return [f.message for f in run_checks(spec, load_catalog()) if f.level is Severity.ERROR]


def test_reservation_vms_are_reservation_bound(record):
    """Cluster Toolkit's A3 Ultra and A4 VM modules set RESERVATION_BOUND with a specific reservation."""
    spec = gcp_spec(
        "a3-ultragpu-8g",
        node_groups=_groups("a3-ultragpu-8g", {"mode": "reservation", "reservation": "a3u-res"}),
    )
    rec = record(spec)
    assert rec.error is None, rec.error
    for name in ("t1-gpu-0", "t1-gpu-1"):
        vm = rec.named(name)
        scheduling = vm.inputs["scheduling"]
        assert scheduling["provisioningModel"] == "RESERVATION_BOUND", f"{vm.urn}: {scheduling}"
        assert scheduling["onHostMaintenance"] == "TERMINATE", f"{vm.urn}: {scheduling}"
        assert vm.inputs["reservationAffinity"]["type"] == "SPECIFIC_RESERVATION", f"{vm.urn}"


@pytest.mark.parametrize("instance_type", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_check_refuses_on_demand_a3_ultra_and_a4_naming_the_options(instance_type):
    spec = gcp_spec(instance_type, node_groups=_groups(instance_type, {"mode": "on_demand"}))
    errors = [e for e in _errors(spec) if "no on-demand capacity" in e]
    assert len(errors) == 1, _errors(spec)
    for option in ("mode: reservation", "mode: spot", "mode: flex_start"):
        assert option in errors[0], errors[0]


def test_on_demand_a3_mega_is_still_fine():
    spec = gcp_spec("a3-megagpu-8g", node_groups=_groups("a3-megagpu-8g", {"mode": "on_demand"}))
    assert not [e for e in _errors(spec) if "on-demand" in e], _errors(spec)


def test_flex_start_vms_run_for_their_max_run_duration(record):
    capacity = {"mode": "flex_start", "max_run_duration": "3d"}
    rec = record(gcp_spec("a4-highgpu-8g", node_groups=_groups("a4-highgpu-8g", capacity)))
    assert rec.error is None, rec.error
    for name in ("t1-gpu-0", "t1-gpu-1"):
        vm = rec.named(name)
        scheduling = vm.inputs["scheduling"]
        assert scheduling["provisioningModel"] == "FLEX_START", f"{vm.urn}: {scheduling}"
        assert scheduling["maxRunDuration"] == {"seconds": 3 * 24 * 3600}, f"{vm.urn}: {scheduling}"
        assert scheduling["instanceTerminationAction"] == "DELETE", f"{vm.urn}: {scheduling}"
        assert scheduling["automaticRestart"] is False, f"{vm.urn}: {scheduling}"
        assert vm.inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}, f"{vm.urn}"
    assert rec.of_type(POLICY) == [], "flex-start VMs get no gpufleet placement policy"


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        ({"mode": "flex_start"}, "needs 'max_run_duration'"),
        ({"mode": "spot", "max_run_duration": "1d"}, "needs 'max_run_duration'"),
    ],
)
def test_max_run_duration_goes_with_flex_start_only(capacity, message):
    with pytest.raises(ValidationError, match=message):
        gcp_spec("a4-highgpu-8g", node_groups=_groups("a4-highgpu-8g", capacity))


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        ({"mode": "flex_start", "max_run_duration": "8d"}, "at most 7 days"),
        ({"mode": "flex_start", "max_run_duration": "7d"}, None),
        ({"mode": "flex_start", "max_run_duration": "2d"}, None),
        # Compute Engine's own floor is 30 s (limit-vm-runtime); slurm-gcp's 10-minute floor is its policy.
        ({"mode": "flex_start", "max_run_duration": 29}, "at least 30 seconds"),
        ({"mode": "flex_start", "max_run_duration": 30}, None),
        ({"mode": "flex_start", "max_run_duration": "5m"}, None),
        ({"mode": "flex_start", "max_run_duration": "10m"}, None),
    ],
)
def test_flex_start_duration_limit(capacity, message):
    errors = _errors(gcp_spec("a4-highgpu-8g", node_groups=_groups("a4-highgpu-8g", capacity)))
    if message is None:
        assert not errors, errors
    else:
        assert any(message in e for e in errors), errors


def test_flex_start_duration_error_names_the_field_and_the_fix():
    spec = gcp_spec(
        "a4-highgpu-8g", node_groups=_groups("a4-highgpu-8g", {"mode": "flex_start", "max_run_duration": 10})
    )
    (finding,) = [f for f in run_checks(spec, load_catalog()) if f.level is Severity.ERROR]
    assert finding.path.endswith("capacity.max_run_duration"), finding
    assert "got 0:00:10. Set max_run_duration between 30s and 7d" in finding.message, finding.message
    assert "https://cloud.google.com/compute/docs/instances/about-flex-start-vms" in finding.message


def test_flex_start_is_refused_on_aws():
    spec = ClusterSpec.model_validate(
        {
            "name": "fleet",
            "provider": {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"},
            "node_groups": _groups("p5.48xlarge", {"mode": "flex_start", "max_run_duration": "1d"}),
            "fabric": "efa",
        }
    )
    assert any("use mode: capacity_block" in e for e in _errors(spec)), _errors(spec)


def _vm(rec: Any, name: str) -> Any:
    """The VM of that name (A3 Mega's GPU networks share the hosts' names)."""
    [vm] = [r for r in rec.of_type(INSTANCE) if r.name == name]
    return vm


def test_ordinary_reservation_vms_are_standard_not_reservation_bound(record):
    """An ordinary (on-demand, non-dense) reservation: slurm-gcp leaves its VMs STANDARD; RESERVATION_BOUND
    is for reservations from calendar-mode or AI Hypercomputer (dense) future reservations only."""
    capacity = {"mode": "reservation", "reservation": "a3m-res"}
    rec = record(gcp_spec("a3-megagpu-8g", node_groups=_groups("a3-megagpu-8g", capacity)))
    assert rec.error is None, rec.error
    for name in ("t1-gpu-0", "t1-gpu-1"):
        vm = _vm(rec, name)
        scheduling = vm.inputs["scheduling"]
        assert scheduling.get("provisioningModel") != "RESERVATION_BOUND", f"{vm.urn}: {scheduling}"
        assert vm.inputs["reservationAffinity"]["type"] == "SPECIFIC_RESERVATION", f"{vm.urn}"


@pytest.mark.parametrize("kind", ["calendar", "dense"])
def test_calendar_and_dense_reservations_are_reservation_bound_on_any_series(record, kind):
    capacity = {"mode": "reservation", "reservation": "a3m-res", "reservation_type": kind}
    rec = record(gcp_spec("a3-megagpu-8g", node_groups=_groups("a3-megagpu-8g", capacity)))
    assert rec.error is None, rec.error
    scheduling = _vm(rec, "t1-gpu-0").inputs["scheduling"]
    assert scheduling["provisioningModel"] == "RESERVATION_BOUND", scheduling


def test_standard_reservation_type_overrides_the_series_default(record):
    capacity = {"mode": "reservation", "reservation": "a3u-res", "reservation_type": "standard"}
    rec = record(gcp_spec("a3-ultragpu-8g", node_groups=_groups("a3-ultragpu-8g", capacity)))
    assert rec.error is None, rec.error
    scheduling = _vm(rec, "t1-gpu-0").inputs["scheduling"]
    assert scheduling.get("provisioningModel") != "RESERVATION_BOUND", scheduling


def test_reservation_vms_carry_the_reservations_own_placement_policy(record):
    """slurm-gcp attaches the reservation's own resource policies to its VMs; gpufleet creates none."""
    capacity = {"mode": "reservation", "reservation": "a3u-res", "placement_group": "a3u-compact"}
    spec = gcp_spec("a3-ultragpu-8g", node_groups=_groups("a3-ultragpu-8g", capacity))
    assert not _errors(spec), _errors(spec)
    rec = record(spec)
    assert rec.error is None, rec.error
    assert rec.of_type(POLICY) == [], "the reservation's policy is used, none is created"
    project, region = spec.provider.project, spec.provider.region  # type: ignore[union-attr]
    for name in ("t1-gpu-0", "t1-gpu-1"):
        vm = _vm(rec, name)
        policies = vm.inputs["resourcePolicies"]
        assert policies == f"projects/{project}/regions/{region}/resourcePolicies/a3u-compact", policies
        assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE", vm.inputs["scheduling"]


def test_shared_reservations_policy_lives_in_the_owner_project(record):
    capacity = {
        "mode": "reservation",
        "reservation": "projects/owner-proj/reservations/a3u-res",
        "placement_group": "a3u-compact",
    }
    spec = gcp_spec("a3-ultragpu-8g", node_groups=_groups("a3-ultragpu-8g", capacity))
    rec = record(spec)
    assert rec.error is None, rec.error
    policies = _vm(rec, "t1-gpu-0").inputs["resourcePolicies"]
    assert policies.startswith("projects/owner-proj/regions/"), policies


def test_check_refuses_a_placement_policy_name_google_would_refuse():
    capacity = {"mode": "reservation", "reservation": "a3u-res", "placement_group": "My_Policy"}
    spec = gcp_spec("a3-ultragpu-8g", node_groups=_groups("a3-ultragpu-8g", capacity))
    assert [e for e in _errors(spec) if "not a resource policy name" in e], _errors(spec)


def test_reservation_type_only_with_mode_reservation():
    with pytest.raises(ValidationError, match="reservation_type"):
        gcp_spec(
            "a3-megagpu-8g",
            node_groups=_groups("a3-megagpu-8g", {"mode": "spot", "reservation_type": "dense"}),
        )


def test_a_flex_group_shorter_than_the_lifetime_warns_and_gets_no_placement_info(record):
    """GCP audit N12: the placement INFO spoke of a compact policy flex groups never get."""
    capacity = {"mode": "flex_start", "max_run_duration": "12h"}
    spec = gcp_spec("a3-megagpu-8g", node_groups=_groups("a3-megagpu-8g", capacity), lifetime={"ttl": "2d"})
    findings = run_checks(spec, load_catalog())
    warnings = [f.message for f in findings if f.level is Severity.WARNING and f.check == "gcp_capacity"]
    expected = "max_run_duration 12:00:00, before the cluster's lifetime.ttl 2 days"
    assert any(expected in w for w in warnings), warnings
    placement = [f.message for f in findings if f.check == "gcp_placement"]
    assert not any("max distance" in m for m in placement), placement
    expected = "gets no compact placement policy: flex-start VMs take none"
    assert any(expected in m for m in placement), placement
    rec = record(spec)
    assert rec.error is None, rec.error
    assert not rec.of_type(POLICY), "a flex-start group got a placement policy"


# ---- flex-start: the provider waits as long as Google queues (GCP audit 2026-11-27 H3) ----------------

PROVIDER_DEFAULT_TIMEOUT_S = 20 * 60  # resource_compute_instance.go:248-252 (e03b7622): create and update


def _timeouts(spec: ClusterSpec) -> dict[str, Any]:
    """Each VM's custom timeouts, as the program passes them (a stack transformation sees the options)."""
    import pulumi

    from gpufleet.infra.gcp.mocks import GcpMockCloud
    from gpufleet.infra.plan import run_offline
    from gpufleet.infra.program import cluster_program

    seen: dict[str, Any] = {}

    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            if args.type_ == INSTANCE:
                seen[args.name] = args.opts.custom_timeouts

        pulumi.runtime.register_stack_transformation(keep)
        return cluster_program(spec, datetime(2026, 11, 27, 9, 0, tzinfo=UTC))

    run_offline(program, GcpMockCloud(spec), stack=spec.name)
    return seen


def _seconds(text: str | None) -> float:
    if not text:
        return PROVIDER_DEFAULT_TIMEOUT_S
    return float(text[:-1]) * {"s": 1, "m": 60, "h": 3600}[text[-1]]


def provider_create(granted_after_s: float, create_timeout_s: float) -> str:
    """The provider's create of a VM whose insert operation Google finishes after ``granted_after_s``
    (resource_compute_instance.go:2026-2040, e03b7622): it waits for the operation under the create
    timeout; when the wait ends first it clears the id ("The resource didn't actually create"), and the
    stack forgets a request Google may still grant: a VM that would run outside the stack's state."""
    return "in state" if granted_after_s <= create_timeout_s else "forgotten: may run outside the state"


def test_flex_start_vms_wait_out_googles_queue_so_none_runs_outside_the_state():
    """Failed on main at bc3d77c: flex-start VMs had the provider's 20-minute timeouts, and a request
    Google granted after 20 minutes (it queues them for up to 2 h) became a VM no destroy would find."""
    from gpufleet.catalog.gcp import FLEX_START_QUEUE

    capacity = {"mode": "flex_start", "max_run_duration": "2d"}
    spec = gcp_spec("a4-highgpu-8g", node_groups=_groups("a4-highgpu-8g", capacity), lifetime={"ttl": "1d"})
    timeouts = _timeouts(spec)
    flex = [name for name in timeouts if name.startswith(f"{spec.name}-gpu")]
    assert len(flex) == 2, timeouts
    for name in flex:
        create = _seconds(getattr(timeouts[name], "create", None))
        update = _seconds(getattr(timeouts[name], "update", None))
        queued = FLEX_START_QUEUE.total_seconds()
        assert provider_create(queued, create) == "in state", f"{name}: create timeout {create} s"
        assert update >= queued, f"{name}: the wait for RUNNING (update timeout) is {update} s"
    head = timeouts[spec.host_names(spec.controller_group)[0]]
    assert head is None, "an on-demand VM keeps the provider's defaults"
    notes = [f.message for f in run_checks(spec, load_catalog()) if f.level is Severity.INFO]
    assert any("may take up to 130 min" in note for note in notes), notes
