"""The GCP leftover check: queries, result filtering and paging, through the real Cloud Asset client.

The client's transport call is replaced by canned ``SearchAllResources`` pages (the REST JSON shape, in
``data/cloudasset-searchall.json``), so the client library's own pager is what follows ``nextPageToken``.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import asset_v1

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.gcp import leftovers as leftovers_gcp
from gpufleet.infra.gcp.leftovers import client_search, find_leftovers, parse_results, search_queries

PAGES = json.loads((Path(__file__).parent / "data" / "cloudasset-searchall.json").read_text(encoding="utf-8"))


def response(page: dict) -> asset_v1.SearchAllResourcesResponse:
    return asset_v1.SearchAllResourcesResponse.from_json(json.dumps(page), ignore_unknown_fields=True)


@pytest.fixture
def client():
    return asset_v1.AssetServiceClient(credentials=AnonymousCredentials())


def test_queries_search_labels_and_the_description_marker():
    assert search_queries("demo") == ["labels.gpufleet-cluster:demo", 'description:"gpufleet-cluster=demo"']


def test_parse_keeps_only_this_clusters_resources():
    page = response(PAGES["labels.gpufleet-cluster:demo"][0])
    names = [item.short_name for item in parse_results(page.results, "demo")]
    assert names == ["demo-gpu-0", "demo-gpu-0"], names  # the VM and its boot disk; not demo-2's VM


def test_find_leftovers_follows_pages_and_merges_both_searches(client):
    requests: list[asset_v1.SearchAllResourcesRequest] = []

    def answer(request, **_kwargs):
        requests.append(request)
        index = int(request.page_token or "0")
        return response(PAGES[request.query][index])

    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=answer):
        found = find_leftovers("demo", "my-proj-1", search=client_search(client))
    assert len(requests) == 3, requests  # the label search has two pages
    assert {(r.scope, r.page_size) for r in requests} == {("projects/my-proj-1", 500)}
    assert [(item.kind, item.short_name) for item in found] == [
        ("compute.googleapis.com/Disk", "demo-gpu-0"),
        ("compute.googleapis.com/Firewall", "demo-ssh-iap"),
        ("compute.googleapis.com/Instance", "demo-gpu-0"),
        ("compute.googleapis.com/Network", "demo-host"),
        ("lustre.googleapis.com/Instance", "demo-lustre"),
    ]
    assert found[2].detail == "us-central1-a, RUNNING"
    assert str(found[3]) == (
        "compute.googleapis.com/Network "
        "//compute.googleapis.com/projects/my-proj-1/global/networks/demo-host (global)"
    )


def test_a_disabled_api_says_how_to_enable_it(client):
    from google.api_core import exceptions

    from gpufleet.errors import ProvisionError

    refused = exceptions.PermissionDenied("Cloud Asset API has not been used in project 123 before")
    with (
        mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=refused),
        pytest.raises(ProvisionError) as failure,
    ):
        find_leftovers("demo", "my-proj-1", search=client_search(client))
    assert "gcloud services enable cloudasset.googleapis.com" in (failure.value.hint or "")


def test_the_installed_environment_runs_the_check_up_to_the_credentials(monkeypatch, tmp_path):
    """The default path imports google-cloud-asset and google-auth from the installed environment
    (a GCP 'down' used to end in an ImportError here): without credentials it is an EnvironmentProblem."""
    for variable in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server either
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    with pytest.raises(EnvironmentProblem) as failure:
        leftovers_gcp.find_leftovers("demo", "my-proj-1")
    assert "no Google credentials" in failure.value.message
    assert "application-default login" in (failure.value.hint or "")


def test_the_client_library_is_a_declared_dependency():
    root = Path(__file__).resolve().parents[3]
    import tomllib

    declared = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert any(item.startswith("google-cloud-asset") for item in declared), declared


def test_the_reaper_finds_expired_clusters_by_their_labels(client):
    """``gpufleet reap --gcp-project`` lists clusters whose gpufleet-expires-at label has passed."""
    from datetime import UTC, datetime

    from gpufleet.infra.gcp.leftovers import find_expired

    def result(name: str, cluster: str, expires: str) -> dict:
        return {
            "name": f"//compute.googleapis.com/projects/p1/zones/us-central1-a/instances/{name}",
            "assetType": "compute.googleapis.com/Instance",
            "labels": {"gpufleet-cluster": cluster, "gpufleet-expires-at": expires},
        }

    pages = {
        "labels.gpufleet-expires-at:*": [
            {
                "results": [
                    result("old-gpu-0", "old", "20261122t0900z"),
                    result("new-gpu-0", "new", "20261124t0900z"),
                ],
                "nextPageToken": "1",
            },
            {"results": [result("old-gpu-1", "old", "20261122t0800z"), result("odd-0", "odd", "tomorrow")]},
        ]
    }
    queries: list[str] = []

    def answer(request, **_kwargs):
        queries.append(request.query)
        return response(pages[request.query][int(request.page_token or "0")])

    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    with mock.patch.object(type(client.transport.search_all_resources), "__call__", side_effect=answer):
        expired = find_expired("p1", now=now, search=client_search(client))
    assert queries == ["labels.gpufleet-expires-at:*"] * 2
    # the latest of its VMs' labels, never the earliest (a label an edit did not reach is older)
    assert [(e.cluster, e.expires_at, e.resources) for e in expired] == [
        ("old", datetime(2026, 11, 22, 9, 0, tzinfo=UTC), 2)
    ]
