"""The GCP program puts each node's facts in its instance metadata (a baked cluster), and no secret. GCP
nodes do not read the munge key at boot yet: the facts say so (``push``), their unit skips itself, and
configure pushes as before. Under Pulumi's mocks."""

from __future__ import annotations

from typing import Any

from gcp_testlib import CREATED_AT, gcp_spec

from gpufleet.bake.baker import spec_hash
from gpufleet.infra.gcp.component import GpuClusterGcp, GpuClusterGcpArgs
from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.inventory.node_facts import METADATA_KEY, NodeFacts

INSTANCE = "gcp:compute/instance:Instance"


def plan(spec: Any, *, boot: bool) -> Plan:
    digest = spec_hash(spec)
    assert digest is not None
    image = CloudImage(
        id="gpufleet-baked-1", name="gpufleet-baked-1", digest=digest, base="ubuntu", created=""
    )

    def program() -> Any:
        args = GpuClusterGcpArgs(
            spec=spec,
            created_at=CREATED_AT,
            ssh_keys=("ssh-ed25519 AAAA cluster",),
            baked=image,
            boot_configure=boot,
        )
        return GpuClusterGcp(spec.name, args).stack_outputs

    return run_offline(program, GcpMockCloud(spec), stack=spec.name)


def test_every_node_has_its_facts_in_its_metadata_and_no_secret() -> None:
    spec = gcp_spec()
    result = plan(spec, boot=True)
    vms = {vm.name: vm for vm in result.of_type(INSTANCE)}
    assert sorted(vms) == ["t1-gpu-0", "t1-gpu-1", "t1-head"]
    facts = {name: NodeFacts.parse(vm.inputs["metadata"][METADATA_KEY]) for name, vm in vms.items()}
    head, gpu = facts["t1-head"], facts["t1-gpu-1"]
    assert head.controller_address is None and gpu.controller == "t1-head" and gpu.controller_address
    assert gpu.host == "t1-gpu-1" and gpu.groups == ["compute"] and gpu.provider == "gcp"
    assert gpu.host_vars["gpufleet_gpus"] == 8 and gpu.host_vars["gpufleet_fabric_interfaces"] == 8
    assert gpu.fabric.value == spec.fabric.kind.value
    assert gpu.munge_key.kind == "push" and gpu.munge_key.secret_arn is None
    for vm in vms.values():
        text = str(vm.inputs["metadata"])
        assert "PRIVATE KEY" not in text and "munge.key" not in text and "token" not in text.lower()
    assert result.outputs["boot_configure"] is False  # configure pushes: no munge key read at boot yet


def test_without_boot_configure_the_metadata_is_as_before() -> None:
    result = plan(gcp_spec(), boot=False)
    for vm in result.of_type(INSTANCE):
        assert sorted(vm.inputs["metadata"]) == ["user-data"], vm.inputs["metadata"]
