"""The GCP leftover check after a destroy: Cloud Asset Inventory lags a deletion, so each result is read
from its own API, and one that answers 404 is no leftover (also when it goes between two polls).

Both APIs are faked at the client boundary: the real ``AssetServiceClient`` with its transport call
answering canned ``SearchAllResources`` pages (REST JSON shape), and a fake of the resources' own REST
GET answering as Compute Engine and Managed Lustre do: the resource's JSON, or 404 with Google's error
body (``{"error": {"code": 404, "status": "NOT_FOUND"}}``, https://cloud.google.com/apis/design/errors,
read 2026-11-24)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import asset_v1

from gpufleet.infra.gcp.leftovers import client_search, find_leftovers, resource_url
from gpufleet.infra.leftovers import settle

ZONE = "us-central1-a"
VM = f"//compute.googleapis.com/projects/my-proj-1/zones/{ZONE}/instances/demo-gpu-0"
LUSTRE = f"//lustre.googleapis.com/projects/my-proj-1/locations/{ZONE}/instances/demo-lustre"
NETWORK = "//compute.googleapis.com/projects/my-proj-1/global/networks/demo-host"


def _result(name: str, asset_type: str, state: str) -> dict:
    return {
        "name": name,
        "assetType": asset_type,
        "project": "projects/123456789012",
        "location": ZONE,
        "state": state,
        "labels": {"gpufleet-cluster": "demo"},
    }


class Cloud:
    """What Cloud Asset still lists (``indexed``), and what each resource's own API holds (``live``)."""

    def __init__(self) -> None:
        self.indexed = [
            _result(VM, "compute.googleapis.com/Instance", "RUNNING"),
            _result(LUSTRE, "lustre.googleapis.com/Instance", "DELETING"),
        ]
        self.live: dict[str, dict] = {
            resource_url(VM): {"kind": "compute#instance", "name": "demo-gpu-0", "status": "TERMINATED"},
            resource_url(LUSTRE): {
                "name": LUSTRE.removeprefix("//lustre.googleapis.com/"),
                "state": "DELETING",
            },
        }
        self.gets: list[str] = []

    def search(self, request, **_kwargs) -> asset_v1.SearchAllResourcesResponse:
        page = {"results": self.indexed if request.query.startswith("labels.") else []}
        return asset_v1.SearchAllResourcesResponse.from_json(json.dumps(page), ignore_unknown_fields=True)

    def get(self, url: str) -> tuple[int, dict | None]:
        self.gets.append(url)
        if url in self.live:
            return 200, self.live[url]
        error = {"code": 404, "message": f"The resource '{url}' was not found", "status": "NOT_FOUND"}
        return 404, {"error": error}


def _poll(client, cloud: Cloud, on_sleep=None):
    """``settle`` over the finder, on a fake clock; ``on_sleep`` is what the cloud does between polls."""
    clock = [0.0]

    def sleep(seconds: float) -> None:
        if on_sleep is not None:
            on_sleep()
        clock[0] += seconds

    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=cloud.search):
        return settle(
            lambda: find_leftovers("demo", "my-proj-1", search=client_search(client), get=cloud.get),
            clock=lambda: clock[0],
            sleep=sleep,
            interval_s=20,
        )


@pytest.fixture
def client():
    return asset_v1.AssetServiceClient(credentials=AnonymousCredentials())


def test_resource_urls_follow_each_services_rest_root():
    assert resource_url(VM) == (
        f"https://compute.googleapis.com/compute/v1/projects/my-proj-1/zones/{ZONE}/instances/demo-gpu-0"
    )
    assert resource_url(LUSTRE) == (
        f"https://lustre.googleapis.com/v1/projects/my-proj-1/locations/{ZONE}/instances/demo-lustre"
    )
    assert resource_url("//storage.googleapis.com/some-bucket") is None


def test_what_cloud_asset_lists_but_its_own_api_has_deleted_is_no_leftover(client):
    cloud = Cloud()
    del cloud.live[resource_url(VM)]  # the VM is deleted; Cloud Asset still lists it RUNNING
    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=cloud.search):
        found = find_leftovers("demo", "my-proj-1", search=client_search(client), get=cloud.get)
    assert [item.id for item in found] == [LUSTRE], found  # Lustre still exists (DELETING)
    assert sorted(cloud.gets) == sorted([resource_url(VM), resource_url(LUSTRE)])


def test_a_stopped_vm_is_still_a_leftover(client):
    cloud = Cloud()  # the VM answers 200 with status TERMINATED: stopped, not deleted; its disk bills
    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=cloud.search):
        found = find_leftovers("demo", "my-proj-1", search=client_search(client), get=cloud.get)
    assert {item.id for item in found} == {VM, LUSTRE}


def test_a_forbidden_get_proves_nothing(client):
    cloud = Cloud()
    cloud.live.clear()

    def forbidden(url: str) -> tuple[int, dict | None]:
        return 403, {"error": {"code": 403, "status": "PERMISSION_DENIED"}}

    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=cloud.search):
        found = find_leftovers("demo", "my-proj-1", search=client_search(client), get=forbidden)
    assert {item.id for item in found} == {VM, LUSTRE}


def test_a_read_that_lags_one_poll_then_clears(client):
    """Poll 1: the VM and the Lustre instance exist. Between the polls both are deleted; Cloud Asset
    still lists them for the second poll, their own APIs answer 404: the check ends clean."""
    cloud = Cloud()
    settled = _poll(client, cloud, cloud.live.clear)
    assert settled.leftovers == [] and settled.reads == 2, settled
    assert len(cloud.indexed) == 2  # Cloud Asset never caught up during the check


def test_a_network_still_there_is_reported_with_how_long(client):
    cloud = Cloud()
    cloud.indexed = [_result(NETWORK, "compute.googleapis.com/Network", "")]
    cloud.live = {resource_url(NETWORK): {"kind": "compute#network", "name": "demo-host"}}
    settled = _poll(client, cloud)
    assert [str(item) for item in settled.leftovers] == [
        f"compute.googleapis.com/Network {NETWORK} ({ZONE}): still listed after 20 s (2 read(s) in a row)"
    ]
