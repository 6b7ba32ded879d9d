"""GCP preflight checks: (spec change, expected message or None) tables, run offline on the catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gcp_testlib import gcp_gpu_types, gcp_spec

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.catalog.gcp import filestore_size_problem, lustre_size_problem, vpc_count
from gpufleet.preflight import Severity, run_checks
from gpufleet.spec import load_spec
from gpufleet.spec.model import FabricKind, ManagedLustreFilesystem

ROOT = Path(__file__).resolve().parents[3]


def findings(spec, catalog: Catalog | None = None, level: Severity = Severity.WARNING) -> list[str]:
    return [f"{f.level.value}:{f.check}:{f.message}" for f in run_checks(spec, catalog, min_level=level)]


def gcp_errors(spec, catalog: Catalog | None = None) -> list[str]:
    return [m for m in findings(spec, catalog, Severity.ERROR) if ":gcp_" in m or ":instance_type" in m]


@pytest.mark.parametrize("item", gcp_gpu_types(), ids=lambda item: item.name)
def test_every_gcp_gpu_type_passes_with_its_own_fabric(item):
    assert findings(gcp_spec(item.name), level=Severity.ERROR) == []


@pytest.mark.parametrize(
    ("size", "throughput", "expected"),
    [
        (18_000, 500, None),
        (9_000, 1000, None),
        (72_000, 125, None),
        (36_000, 250, None),
        (20_000, 500, "steps of 18000 GiB at this size; got 20000, use 18000 or 36000"),
        (9_000, 500, "takes 18000-20016000 GiB; got 9000"),
        (9_000, 250, "takes 36000-40032000 GiB"),
        (1_530_000, 1000, None),  # the last size of the 9000 GiB step
        (1_584_000, 1000, None),  # 22 x 72000, in the larger-step range
        (1_539_000, 1000, "steps of 72000 GiB at this size"),
        (10_080_000, 1000, "takes 9000-10008000 GiB"),
    ],
)
def test_managed_lustre_sizes(size, throughput, expected):
    problem = lustre_size_problem(size, throughput)
    if expected is None:
        assert problem is None, problem
    else:
        assert problem is not None and expected in problem, problem


@pytest.mark.parametrize(
    ("size", "tier", "expected"),
    [
        (1_024, "BASIC_HDD", None),
        (1_500, "BASIC_HDD", None),
        (2_000, "BASIC_SSD", "takes 2560-65434 GiB"),
        (1_024, "ZONAL", None),
        (1_100, "ZONAL", "steps of 256 GiB from 1024 GiB; got 1100, use 1024 or 1280"),
        (9_990, "ZONAL", "takes 1024-9984, 10240-102400 GiB"),
        (10_240, "ZONAL", None),
        (12_000, "ZONAL", "steps of 2560 GiB"),
        (5_000, "REGIONAL", None),
        (102_400, "REGIONAL", None),
    ],
)
def test_filestore_sizes(size, tier, expected):
    problem = filestore_size_problem(size, tier)
    if expected is None:
        assert problem is None, problem
    else:
        assert problem is not None and expected in problem, problem


_HEAD = {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"}


def _groups(head: dict[str, Any] | None = None, **gpu: Any) -> dict[str, Any]:
    group = {"name": "gpu", "roles": ["compute"], "instance_type": "a3-megagpu-8g", "count": 2, **gpu}
    return {"node_groups": [head or _HEAD, group]}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),
        ({"filesystem": {"kind": "managed_lustre", "size_gib": 20000}}, "error:gcp_filesystem_size:"),
        ({"filesystem": {"kind": "filestore", "size_gib": 1100}}, "error:gcp_filesystem_size:"),
        ({"fabric": {"kind": "tcpxo", "interfaces": 4}}, "takes 8 GPU NICs (4 asked)"),
        (_groups(capacity={"mode": "capacity_block", "reservation": "x"}), "capacity_block is AWS's"),
        (_groups(capacity={"mode": "reservation", "reservation": "Bad_Name"}), "is not a reservation name"),
        (
            _groups(capacity={"mode": "reservation", "reservation": "projects/owner-proj-1/reservations/r1"}),
            None,
        ),
        (
            _groups(capacity={"mode": "reservation", "reservation_group_arn": "arn:aws:x"}),
            "reservation_group_arn is AWS only",
        ),
        (_groups(count=1501), "holds at most 1500 A3 Mega VMs"),
        (
            _groups(head={**_HEAD, "capacity": {"mode": "spot"}}),
            "warning:gcp_capacity:the controller runs on a Spot",
        ),
        (_groups(head={**_HEAD, "instance_type": "a3-megagpu-8g"}), "warning:gcp_nic_layout:"),
    ],
    ids=[
        "valid",
        "lustre-step",
        "filestore-step",
        "fixed-nic-count",
        "capacity-block",
        "reservation-name",
        "shared-reservation",
        "reservation-group",
        "placement-limit",
        "spot-controller",
        "gpu-head",
    ],
)
def test_gcp_checks(changes, expected):
    messages = findings(gcp_spec(**changes))
    gcp = [m for m in messages if ":gcp_" in m]
    if expected is None:
        assert gcp == [], gcp
    else:
        assert any(expected in m for m in gcp), f"{expected!r} not in {gcp}"


def _catalog_with(name: str, **fabric_or_item: Any) -> Catalog:
    """The shipped catalog with one entry changed (fabric fields or item fields)."""
    catalog = load_catalog()
    item = catalog.instance_types[name]
    fabric_keys = set(type(item.fabric).model_fields)
    fabric = item.fabric.model_copy(update={k: v for k, v in fabric_or_item.items() if k in fabric_keys})
    changed = item.model_copy(
        update={"fabric": fabric, **{k: v for k, v in fabric_or_item.items() if k not in fabric_keys}}
    )
    return catalog.model_copy(update={"instance_types": {**catalog.instance_types, name: changed}})


@pytest.mark.parametrize(
    ("instance_type", "change", "expected"),
    [
        ("a3-megagpu-8g", {"zones": ["us-east4-a"]}, "is not offered in us-central1-a"),
        ("a3-megagpu-8g", {"zones": ["us-central1-a"]}, None),
        ("a3-megagpu-8g", {"regions": ["europe-west4"]}, "is not offered in us-central1"),
        ("a3-ultragpu-8g", {"network_profile": None}, "only to a VPC created with the RoCE network profile"),
        ("a3-ultragpu-8g", {"mtu": 8244}, "a RoCE VPC runs with MTU 8896"),
        ("a3-megagpu-8g", {"mtu": 9216}, "a VPC's MTU is 1300-8896"),
        ("a3-megagpu-8g", {"host_nics": 3}, "a VM takes at most 10"),
        ("a3-highgpu-8g", {"gpu_nic_type": "MRDMA", "network_profile": "roce"}, "runs over gVNIC GPU NICs"),
    ],
)
def test_checks_against_the_catalog(instance_type, change, expected):
    catalog = _catalog_with(instance_type, **change)
    errors = gcp_errors(gcp_spec(instance_type), catalog)
    if expected is None:
        assert errors == [], errors
    else:
        assert any(expected in e for e in errors), f"{expected!r} not in {errors}"


@pytest.mark.parametrize(
    ("instance_type", "vpcs"),
    [
        (
            item.name,
            (item.fabric.host_nics or 1)
            + min(item.fabric.interfaces, 1 if item.fabric.network_profile else 99),
        )
        for item in gcp_gpu_types()
    ],
)
def test_vpc_count_per_type(instance_type, vpcs):
    assert vpc_count(gcp_spec(instance_type), load_catalog()) == vpcs


def _service_zone_findings(spec) -> list[tuple[str, str, str]]:
    return [(f.level.value, f.path, f.message) for f in run_checks(spec) if f.check == "gcp_service_zones"]


LUSTRE = {"kind": "managed_lustre", "size_gib": 18000, "throughput_per_tib": 500}


def _in_zone(instance_type: str, region: str, zone: str, **changes: Any):
    provider = {"kind": "gcp", "project": "test-project-1", "region": region, "zone": zone}
    return gcp_spec(instance_type, provider=provider, **changes)


def test_managed_lustre_in_a_zone_without_it_is_an_error_naming_the_zones_that_work():
    (finding,) = _service_zone_findings(
        _in_zone("a3-megagpu-8g", "asia-east1", "asia-east1-b", filesystem=LUSTRE)
    )
    level, path, message = finding
    assert (level, path) == ("error", "provider.zone"), finding
    assert "not offered in asia-east1-b" in message and "asia-east1-a, asia-east1-c" in message, message
    assert "https://cloud.google.com/managed-lustre/docs/locations" in message, message


def test_managed_lustre_in_a_listed_zone_passes():
    assert (
        _service_zone_findings(_in_zone("a3-megagpu-8g", "asia-east1", "asia-east1-c", filesystem=LUSTRE))
        == []
    )


def test_zone_outside_the_data_read_is_reported_not_judged():
    # us-central1 has no row (the page could not be read there); only us-central1-a was seen elsewhere.
    found = _service_zone_findings(
        _in_zone("a3-megagpu-8g", "us-central1", "us-central1-b", filesystem=LUSTRE)
    )
    assert [(level, path) for level, path, _ in found] == [("info", "provider.zone")], found
    assert "does not cover us-central1-b for Managed Lustre" in found[0][2]


def test_a_zone_google_runs_the_service_in_passes_without_a_row():
    """us-central1-a: Google's own daily Managed Lustre test runs there (gcp_zones.yaml 'seen')."""
    assert _service_zone_findings(gcp_spec(filesystem=LUSTRE)) == []


GCP_EXAMPLES = sorted(
    path for path in (ROOT / "examples").glob("*.yaml") if load_spec(path).provider.kind == "gcp"
)


@pytest.mark.parametrize("path", GCP_EXAMPLES, ids=lambda p: p.name)
def test_every_gcp_example_zone_is_covered_by_the_zone_data(path):
    """Each zonal service an example asks for (Managed Lustre, the RoCE profile) is judged offered in its
    zone: no error and no 'does not cover' note."""
    assert _service_zone_findings(load_spec(path)) == []


def test_the_gcp_examples_exercise_both_zonal_services():
    specs = [load_spec(path) for path in GCP_EXAMPLES]
    assert any(isinstance(spec.filesystem, ManagedLustreFilesystem) for spec in specs)
    assert any(spec.fabric.kind is FabricKind.ROCE for spec in specs)


def test_roce_profile_zone_is_reported_while_google_lists_none():
    found = _service_zone_findings(gcp_spec("a3-ultragpu-8g"))
    assert [(level, path) for level, path, _ in found] == [("info", "provider.zone")], found
    assert "us-central1-a-vpc-roce" in found[0][2], found
    assert _service_zone_findings(gcp_spec("a3-megagpu-8g")) == []  # no RoCE VPC, no finding


def _head_type(instance_type: str):
    spec = gcp_spec("a3-megagpu-8g")
    data = spec.model_dump(mode="json", exclude_none=True)
    data["node_groups"][0]["instance_type"] = instance_type
    return type(spec).model_validate(data)


@pytest.mark.parametrize(
    "name", ["n2_standard_8", "N2-standard-8", "n2.standard.8", "n2-standard", "standard-8"]
)
def test_a_head_type_outside_googles_machine_type_grammar_is_an_error(name):
    """An unknown AWS type is an error; a GCP name that cannot be a machine type is one too."""
    errors = [m for m in findings(_head_type(name), level=Severity.ERROR) if "gcp_machine_type_name" in m]
    assert len(errors) == 1, findings(_head_type(name))
    assert "is not a Compute Engine machine type name" in errors[0], errors[0]


@pytest.mark.parametrize(
    "name",
    [
        "n2-standard-16",
        "c3d-highmem-360-lssd",
        "e2-medium",
        "custom-4-5120",
        "n2-custom-8-16384-ext",
        "x4-960",
    ],
)
def test_a_well_formed_unknown_head_type_is_only_a_warning(name):
    spec = _head_type(name)
    assert findings(spec, level=Severity.ERROR) == [], findings(spec, level=Severity.ERROR)
    assert [m for m in findings(spec) if m.startswith("warning:instance_type_known")], findings(spec)
