"""What the program registers so that ``pulumi destroy`` of a GCP cluster can finish: the private services
access connection asks to remove its VPC peering on delete. The destroy itself is not run here (Pulumi's
mocks have no delete); this checks the input that decides it."""

from __future__ import annotations

from gcp_testlib import gcp_spec

CONNECTION = "gcp:servicenetworking/connection:Connection"


def test_private_services_access_asks_to_remove_its_peering_on_delete(record):
    """A PSA connection whose producer still holds resources refuses deletion and leaves its VPC peering,
    which blocks deleting the host VPC (pulumi/pulumi-gcp#3354): REMOVE_PEERING removes the peering then.
    The default (DELETE) and ABANDON both leave the peering behind."""
    rec = record(
        gcp_spec(filesystem={"kind": "managed_lustre", "size_gib": 36000, "throughput_per_tib": 1000})
    )
    connections = rec.of_type(CONNECTION)
    assert len(connections) == 1, [c.urn for c in connections]
    inputs = connections[0].inputs
    assert inputs.get("deletionPolicy") == "REMOVE_PEERING", f"{connections[0].urn}: {inputs}"
    assert inputs.get("updateOnCreationFail") is True, f"{connections[0].urn}: {inputs}"
