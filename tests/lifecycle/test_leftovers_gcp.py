"""The GCP leftover check: query building and result parsing, on canned Cloud Asset responses."""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

import pytest

from gpufleet.errors import EnvironmentProblem
from gpufleet.lifecycle import leftovers_gcp
from gpufleet.lifecycle.leftovers_gcp import find_leftovers, parse_results, search_queries, search_url

PAGES = json.loads((Path(__file__).parent / "data" / "cloudasset-searchall.json").read_text(encoding="utf-8"))


def test_queries_search_labels_and_the_description_marker():
    assert search_queries("demo") == ["labels.gpufleet-cluster:demo", 'description:"gpufleet-cluster=demo"']


def test_search_url_encodes_the_query_and_pages():
    url = search_url("my-proj-1", 'description:"gpufleet-cluster=demo"', "tok 2")
    parsed = urllib.parse.urlsplit(url)
    assert parsed.netloc == "cloudasset.googleapis.com"
    assert parsed.path == "/v1/projects/my-proj-1/resources:searchAll"
    params = urllib.parse.parse_qs(parsed.query)
    assert params == {
        "query": ['description:"gpufleet-cluster=demo"'],
        "pageSize": ["500"],
        "pageToken": ["tok 2"],
    }


def test_parse_keeps_only_this_clusters_resources():
    page = PAGES["labels.gpufleet-cluster:demo"][0]
    names = [item.short_name for item in parse_results(page, "demo")]
    assert names == ["demo-gpu-0", "demo-gpu-0"], names  # the VM and its boot disk; not demo-2's VM


def test_find_leftovers_follows_pages_and_merges_both_searches():
    calls: list[str] = []

    def fetch(url: str):
        calls.append(url)
        params = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
        pages = PAGES[params["query"][0]]
        index = int(params.get("pageToken", ["0"])[0])
        return pages[index]

    found = find_leftovers("demo", "my-proj-1", fetch=fetch)
    assert len(calls) == 3, calls  # the label search has two pages
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


def test_no_google_auth_is_an_environment_problem(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.auth", None)
    with pytest.raises(EnvironmentProblem) as info:
        leftovers_gcp.default_access_token()
    assert "google-auth" in str(info.value) and "print-access-token" in str(info.value)
