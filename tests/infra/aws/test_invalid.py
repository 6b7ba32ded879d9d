"""Invalid specs fail before any resource is registered, with every preflight error listed."""

from __future__ import annotations

import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.errors import SpecError
from gpufleet.infra import program
from gpufleet.infra.aws import GpuClusterAws, GpuClusterAwsArgs

INVALID = {
    "fsx size off the steps": (
        {"filesystem": {"kind": "fsx_lustre", "size_gib": 3000}},
        "3000 GiB is not a size FSx for Lustre PERSISTENT_2 takes",
    ),
    "fsx throughput": (
        {"filesystem": {"kind": "fsx_lustre", "size_gib": 2400, "throughput_per_tib": 300}},
        "PERSISTENT_2 takes a throughput of 125, 250, 500, 1000",
    ),
    "efa on a type without it": ({"gpu": {"instance_type": "g5.xlarge"}}, "knows no EFA on g5.xlarge"),
    "too many efa interfaces": ({"fabric": {"kind": "efa", "interfaces": 40}}, "p5.48xlarge has 32"),
    "head node on spot": (
        {"node_groups": [{"name": "head", "roles": ["controller"], "instance_type": "m7i.xlarge",
                          "capacity": {"mode": "spot"}},
                         {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2}]},
        "the head node runs slurmctld",
    ),
    "bad reservation id": (
        {"gpu": {"capacity": {"mode": "capacity_block", "reservation": "my-block"}}},
        "'my-block' is not an EC2 capacity reservation id",
    ),
    "unknown gpu type": ({"gpu": {"instance_type": "p9.96xlarge"}}, "not in gpufleet's aws catalog"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_spec_registers_nothing(recorded, case):
    changes, message = INVALID[case]
    spec = aws_spec(**changes)
    with pytest.raises(SpecError) as failure:
        program.plan_spec(spec, CREATED_AT)
    assert message in str(failure.value), str(failure.value)
    assert "nothing was created" in str(failure.value)
    assert recorded() == [], f"registered before failing: {[r.urn for r in recorded()]}"


def test_every_error_is_listed_at_once(recorded):
    spec = aws_spec(
        filesystem={"kind": "fsx_lustre", "size_gib": 3000, "throughput_per_tib": 300},
        fabric={"kind": "efa", "interfaces": 40},
    )
    with pytest.raises(SpecError) as failure:
        program.plan_spec(spec, CREATED_AT)
    text = str(failure.value)
    assert "fails 3 preflight check(s)" in text, text
    for fragment in ("filesystem.size_gib", "filesystem.throughput_per_tib", "fabric.interfaces"):
        assert fragment in text, text


def test_component_refuses_another_provider():
    from gpufleet.spec import ClusterSpec

    data = aws_spec().model_dump(mode="json")
    data["provider"] = {
        "kind": "gcp",
        "project": "my-project-123",
        "region": "us-central1",
        "zone": "us-central1-a",
    }
    data["fabric"] = "ethernet"
    data["node_groups"][0]["instance_type"] = "n2-standard-4"
    data["node_groups"][1]["instance_type"] = "a3-megagpu-8g"
    with pytest.raises(SpecError, match="needs provider 'aws'"):
        GpuClusterAws("x", GpuClusterAwsArgs(spec=ClusterSpec.model_validate(data), created_at=None))  # type: ignore[arg-type]
