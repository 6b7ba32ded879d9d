"""The next ``gpufleet up`` makes again the VMs Compute Engine no longer runs (GCP audit 2026-11-27 M1).

The stack's exported deployment holds each VM as the provider wrote it (its id
``projects/P/zones/Z/instances/NAME``, resource_compute_instance.go:2025 at terraform-provider-google
e03b7622); the Compute API's instances.get answers 404 for a deleted VM and a TERMINATED status for a
stopped one, with its scheduling (Instance resource, compute/docs/reference/rest/v1/instances). On main
at bc3d77c GcpBackend replaced nothing: a flex-start VM deleted at its max_run_duration stayed in the state
and 'up' changed nothing, although the check said the next up asks for new VMs.
"""

from __future__ import annotations

from typing import Any

from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.gcp.lost import COMPUTE, lost_vms

URN = "urn:pulumi:s::gpufleet::gpufleet:gcp:GpuCluster$gcp:compute/instance:Instance::{}"


def _vm(name: str, model: str = "STANDARD") -> dict[str, Any]:
    path = f"projects/p1/zones/us-central1-a/instances/{name}"
    return {
        "urn": URN.format(name),
        "type": "gcp:compute/instance:Instance",
        "id": path,
        "outputs": {"id": path, "scheduling": {"provisioningModel": model}},
    }


def test_gone_and_preempted_vms_are_made_again_others_stay():
    deployment = {
        "resources": [
            _vm("c-head"),
            _vm("c-gpu-0", "FLEX_START"),
            _vm("c-spot-0", "SPOT"),
            _vm("c-gpu-1"),
            {**_vm("c-old"), "delete": True},  # pending deletion: not ours to replace
        ]
    }
    answers = {
        "c-head": (200, {"status": "RUNNING"}),
        "c-gpu-0": (404, None),  # deleted at the end of its max_run_duration
        "c-spot-0": (200, {"status": "TERMINATED", "scheduling": {"provisioningModel": "SPOT"}}),
        "c-gpu-1": (200, {"status": "TERMINATED", "scheduling": {"provisioningModel": "STANDARD"}}),
    }
    asked: list[str] = []

    def get(url: str) -> tuple[int, dict[str, Any] | None]:
        asked.append(url)
        return answers[url.rsplit("/", 1)[-1]]

    lost = lost_vms(deployment, get)
    assert set(lost) == {URN.format("c-gpu-0"), URN.format("c-spot-0")}, lost
    assert "max_run_duration" in lost[URN.format("c-gpu-0")]
    assert "preemption" in lost[URN.format("c-spot-0")]
    assert asked[0] == f"{COMPUTE}/projects/p1/zones/us-central1-a/instances/c-head", asked


def test_the_gcp_backend_replaces_them_before_up(monkeypatch):
    from gpufleet.infra.gcp import leftovers

    monkeypatch.setattr(leftovers, "session_get", lambda: lambda url: (404, None))
    replaced = pulumi_backend_of("gcp").replace_before_up({"resources": [_vm("c-gpu-0", "FLEX_START")]})
    assert list(replaced) == [URN.format("c-gpu-0")], replaced
