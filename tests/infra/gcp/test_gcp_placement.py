"""Compact placement sized like slurm-gcp's placement groups, and what a compact policy implies."""

from __future__ import annotations

import pytest
from gcp_testlib import gcp_spec

from gpufleet.catalog.gcp import compact_max_distance

POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"


@pytest.mark.parametrize(
    ("instance_type", "count", "distance"),
    [
        ("a3-megagpu-8g", 2, 2),  # A3 accepts 2 and 3; 2 holds 256 A3 VMs (slurm-gcp)
        ("a3-megagpu-8g", 256, 2),
        ("a3-megagpu-8g", 257, 3),
        ("a4-highgpu-8g", 150, 2),  # 150 for machine types other than A3
        ("a4-highgpu-8g", 151, 3),
        ("a3-ultragpu-8g", 1500, 3),
        ("a2-highgpu-8g", 4, None),  # A2 takes no max distance
    ],
)
def test_max_distance_follows_the_group_size(instance_type, count, distance):
    assert compact_max_distance(instance_type, count) == distance


def test_a_large_group_gets_the_wider_distance_in_its_policy(record):
    groups = [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "a3-megagpu-8g", "count": 300},
    ]
    rec = record(gcp_spec(node_groups=groups))
    assert rec.error is None, rec.error
    (policy,) = rec.of_type(POLICY)
    assert policy.inputs["groupPlacementPolicy"]["maxDistance"] == 3, policy.inputs


def test_cpu_groups_under_a_compact_policy_terminate_on_host_maintenance(record):
    """A VM in a compact placement policy cannot live-migrate; slurm-gcp sets TERMINATE for any VM with
    resource policies, GPUs or not."""
    groups = [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
        {"name": "cpu", "roles": ["compute"], "instance_type": "c3-standard-8", "count": 2},
    ]
    rec = record(gcp_spec(node_groups=groups, fabric="ethernet"))
    assert rec.error is None, rec.error
    assert [p.name for p in rec.of_type(POLICY)] == ["t1-cpu-placement"]
    for name in ("t1-cpu-0", "t1-cpu-1"):
        vm = rec.named(name)
        assert vm.inputs.get("resourcePolicies"), f"{vm.urn}: no placement policy"
        assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE", f"{vm.urn}: {vm.inputs}"
    head = rec.named("t1-head")
    assert "scheduling" not in head.inputs, f"{head.urn}: the head node has no policy, it may live-migrate"
