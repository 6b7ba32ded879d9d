"""AWS preflight checks: a table of (spec change, expected finding or None)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.catalog.aws import fsx_size_ok, fsx_sizes_near
from gpufleet.preflight import Severity, run_checks
from gpufleet.spec.model import ClusterSpec

BASE: dict[str, Any] = {
    "name": "pf",
    "provider": {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
    ],
    "fabric": "efa",
}


def spec_with(change: dict[str, Any]) -> ClusterSpec:
    data = copy.deepcopy(BASE)
    for key, value in change.items():
        if key == "gpu":
            data["node_groups"][1].update(value)
        elif key == "head":
            data["node_groups"][0].update(value)
        elif key == "provider":
            data["provider"].update(value)
        else:
            data[key] = value
    return ClusterSpec.model_validate(data)


def aws_findings(spec: ClusterSpec, level: Severity = Severity.INFO):
    return [f for f in run_checks(spec, min_level=level) if f.check.startswith("aws_")]


CR = "cr-0a1b2c3d4e5f60789"
TABLE = [
    ({}, None),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 1200}}, None),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 9600}}, None),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 3600}},
     ("error", "filesystem.size_gib", "Use 2400 or 4800")),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 1800}},
     ("error", "filesystem.size_gib", "Use 1200 or 2400")),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 2400, "throughput_per_tib": 200}},
     ("error", "filesystem.throughput_per_tib", "125, 250, 500, 1000")),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 2400, "deployment_type": "SCRATCH_2",
                     "throughput_per_tib": None}}, None),
    ({"gpu": {"instance_type": "g5.xlarge"}}, ("error", "node_groups[1].instance_type", "knows no EFA")),
    ({"fabric": {"kind": "efa", "interfaces": 16}},
     ("warning", "fabric.interfaces", "about 1600 of 3200 Gbps")),
    ({"fabric": {"kind": "efa", "interfaces": 0}}, ("error", "fabric.interfaces", "no EFA interface")),
    ({"gpu": {"capacity": {"mode": "capacity_block", "reservation": CR}}},
     ("info", "node_groups[1].capacity", "no placement group is created")),
    ({"gpu": {"capacity": {"mode": "reservation", "reservation": CR}}},
     ("warning", "node_groups[1].capacity", "made inside a cluster placement group")),
    ({"gpu": {"capacity": {"mode": "reservation", "reservation": "cr-12"}}},
     ("error", "node_groups[1].capacity.reservation", "not an EC2 capacity reservation id")),
    ({"gpu": {"capacity": {"mode": "reservation", "reservation_group_arn":
                           "arn:aws:resource-groups:eu-west-1:123456789012:group/x"}}},
     ("error", "node_groups[1].capacity.reservation_group_arn", "not in the cluster's region us-east-1")),
    ({"gpu": {"capacity": {"mode": "spot"}}}, ("warning", "node_groups[1].capacity", "one interruption")),
    ({"head": {"capacity": {"mode": "spot"}}}, ("error", "node_groups[0].capacity.mode", "slurmctld")),
    ({"provider": {"vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234"}},
     ("info", "provider.subnet_id", "must be in us-east-1a")),
    ({"gpu": {"count": 4096}, "fabric": "ethernet"}, None),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 2400,
                     "data_repository": {"s3_path": "s3://my-training-data/datasets"}}},
     ("error", "filesystem.data_repository.s3_path", "placeholder bucket (my-training-data)")),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 2400,
                     "data_repository": {"s3_path": "s3://amzn-s3-demo-bucket/data"}}},
     ("error", "filesystem.data_repository.s3_path", "Set s3_path to a bucket of yours")),
    ({"filesystem": {"kind": "fsx_lustre", "size_gib": 2400,
                     "data_repository": {"s3_path": "s3://acme-llm-datasets-us-east-1/pile"}}}, None),
]  # fmt: skip


@pytest.mark.parametrize(("change", "expected"), TABLE, ids=[str(i) for i in range(len(TABLE))])
def test_aws_checks(change, expected):
    spec = spec_with(change)
    findings = aws_findings(spec, Severity.WARNING if expected is None else Severity.INFO)
    if expected is None:
        assert findings == [], [f.to_json() for f in findings]
        return
    level, path, fragment = expected
    matching = [f for f in findings if f.level.value == level and f.path == path and fragment in f.message]
    assert matching, f"wanted {level} at {path} with {fragment!r}; got {[f.to_json() for f in findings]}"


def test_type_not_offered_in_the_region_or_zone():
    """The rules on a catalog made here from the real one (which lists no zones: zone names differ per
    account); test_a_real_example_moved_to_a_region_without_its_type runs the real catalog."""
    from gpufleet.preflight.aws import zone_region

    real = load_catalog()
    p5 = real.get("p5.48xlarge").model_copy(update={"regions": ["us-east-2"]})
    catalog = real.model_copy(update={"instance_types": {**real.instance_types, "p5.48xlarge": p5}})
    (finding,) = list(zone_region(spec_with({}), catalog))
    assert (finding.level, finding.check, finding.path) == (
        Severity.ERROR,
        "aws_type_region",
        "node_groups[1].instance_type",
    )
    assert "not offered in us-east-1" in finding.message and "us-east-2" in finding.message, finding
    p5 = real.get("p5.48xlarge").model_copy(update={"zones": ["us-east-1b", "us-east-1c"]})
    catalog = real.model_copy(update={"instance_types": {**real.instance_types, "p5.48xlarge": p5}})
    (finding,) = list(zone_region(spec_with({}), catalog))
    assert (finding.check, finding.path) == ("aws_type_zone", "provider.zone"), finding
    assert "us-east-1b, us-east-1c" in finding.message, finding


@pytest.mark.parametrize(
    ("example", "region", "level"),
    [
        # p5.48xlarge is not offered in eu-central-1 (the catalog's regions, source
        # aws-instance-type-offerings): refused.
        ("aws-p5.yaml", "eu-central-1", Severity.ERROR),
        # p4d.24xlarge is not offered in us-west-1.
        ("aws-p4d-spot.yaml", "us-west-1", Severity.ERROR),
        # A region the source did not read: a warning, not a refusal.
        ("aws-p5.yaml", "mx-central-1", Severity.WARNING),
    ],
)
def test_a_real_example_moved_to_a_region_without_its_type(example, region, level):
    from gpufleet.spec.load import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / example)
    assert not [f for f in aws_findings(spec) if f.check == "aws_type_region"], (
        "the example itself is refused"
    )
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / example).read_text())
    data["provider"].update({"region": region, "zone": f"{region}a"})
    data["provider"].pop("subnet_id", None)
    moved = ClusterSpec.model_validate(data)
    index, gpu = next((i, g) for i, g in enumerate(spec.node_groups) if "compute" in g.roles)
    found = [
        f
        for f in aws_findings(moved)
        if (f.check, f.path) == ("aws_type_region", f"node_groups[{index}].instance_type")
    ]
    assert [(f.level, gpu.instance_type in f.message, region in f.message) for f in found] == [
        (level, True, True)
    ], found


def test_address_space_of_a_huge_ena_fleet():
    data = copy.deepcopy(BASE)
    data["fabric"] = "ethernet"
    data["node_groups"] += [
        {"name": f"cpu{i}", "roles": ["compute"], "instance_type": "m7i.xlarge", "count": 4096}
        for i in range(8)
    ]
    findings = aws_findings(ClusterSpec.model_validate(data), Severity.ERROR)
    assert [f.check for f in findings] == ["aws_address_space"], [f.to_json() for f in findings]


@pytest.mark.parametrize(
    ("size", "ok"), [(1200, True), (2400, True), (4800, True), (3600, False), (1199, False), (0, False)]
)
def test_fsx_steps(size, ok):
    assert fsx_size_ok(size) is ok
    if not ok and size > 1200:
        below, above = fsx_sizes_near(size)
        assert fsx_size_ok(below) and fsx_size_ok(above) and below < size < above


@pytest.mark.parametrize(
    ("head_type", "message"),
    [
        ("m7i.xlargee", "'m7i.xlargee' is not an EC2 instance type"),  # a typo: did-you-mean names the type
        ("m9z.mega", "'m9z.mega' is not an EC2 instance type"),
        ("c7i.2xlarge", None),  # real, though not in gpufleet's catalog
    ],
)
def test_instance_types_are_checked_against_botocores_ec2_model(head_type, message):
    findings = [
        f
        for f in run_checks(spec_with({"head": {"instance_type": head_type}}), load_catalog())
        if f.check == "aws_instance_type_exists"
    ]
    if message is None:
        assert findings == []
        return
    assert [f.level for f in findings] == [Severity.ERROR], findings
    assert message in findings[0].message and findings[0].path == "node_groups[0].instance_type"
    if head_type == "m7i.xlargee":
        assert "did you mean m7i.xlarge" in findings[0].message, findings[0].message


def test_the_ec2_model_knows_the_newest_gpu_types():
    from gpufleet.preflight.aws import ec2_instance_types

    known = ec2_instance_types()
    assert {"p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"} <= known


def test_p6_b300_passes_with_its_sixteen_efa_cards():
    spec = spec_with({"gpu": {"instance_type": "p6-b300.48xlarge"}})
    assert [f for f in run_checks(spec, min_level=Severity.ERROR)] == []
    too_many = spec_with(
        {"gpu": {"instance_type": "p6-b300.48xlarge"}, "fabric": {"kind": "efa", "interfaces": 17}}
    )
    messages = [f.message for f in run_checks(too_many, min_level=Severity.ERROR)]
    assert any("has 16 fabric interfaces" in m for m in messages), messages


def test_type_with_unknown_figures_is_refused_naming_them():
    spec = spec_with({"gpu": {"instance_type": "p6e-gb200.36xlarge", "count": 18}})
    found = [
        f for f in run_checks(spec, min_level=Severity.ERROR) if f.check == "instance_type_figures_known"
    ]
    assert len(found) == 1, found
    assert found[0].path == "node_groups[1].instance_type"
    assert "fabric.interfaces" in found[0].message and "capacity" in found[0].message, found[0].message


def test_pinned_image_cannot_serve_two_architectures(monkeypatch):
    from gpufleet.catalog import Catalog

    real = load_catalog()
    arm = real.instance_types["p6-b300.48xlarge"].model_copy(update={"cpu_arch": "arm64"})
    catalog = Catalog.model_construct(
        sources=real.sources, instance_types={**real.instance_types, "p6-b300.48xlarge": arm}
    )
    pinned = {
        "provider": {"ami": {"id": "ami-0abc1234def567890"}},
        "gpu": {"instance_type": "p6-b300.48xlarge"},
    }
    found = [f for f in run_checks(spec_with(pinned), catalog) if f.check == "aws_ami_pinned"]
    assert [(f.level, f.path) for f in found] == [(Severity.ERROR, "provider.ami.id")], found
    assert "arm64, x86_64" in found[0].message, found[0].message
