"""What a GCP VM may call: a service account with the scopes the Ops Agent, logging and Cloud Storage need."""

from __future__ import annotations

from gcp_testlib import gcp_spec

INSTANCE = "gcp:compute/instance:Instance"
NEEDED = {
    "https://www.googleapis.com/auth/logging.write",  # Ops Agent logs
    "https://www.googleapis.com/auth/monitoring.write",  # Ops Agent metrics
    "https://www.googleapis.com/auth/devstorage.read_write",  # data and checkpoints in GCS
}


def test_every_vm_gets_a_service_account_with_the_scopes_it_needs(record):
    rec = record(gcp_spec())
    vms = rec.of_type(INSTANCE)
    assert vms
    for vm in vms:
        account = vm.inputs.get("serviceAccount")
        assert account is not None, f"{vm.urn}: no service account, so no scopes"
        scopes = set(account["scopes"])
        assert scopes >= NEEDED, f"{vm.urn}: {account}"
        assert "https://www.googleapis.com/auth/cloud-platform" not in scopes, f"{vm.urn}: too wide"
