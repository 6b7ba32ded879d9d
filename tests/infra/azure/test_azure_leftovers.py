"""The Azure leftover check and expiry sweep against a fake of Resource Manager's REST API (``fake_arm``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fake_arm import SUBSCRIPTION, FakeArm, graph_page, row

from gpufleet.errors import ProvisionError
from gpufleet.infra.azure.leftovers import GROUP_TYPE, cluster_query, find_expired, find_leftovers

GROUP_ID = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/gpufleet-demo"


def test_nothing_left_when_the_group_is_gone_and_the_graph_lists_nothing():
    arm = FakeArm(pages=[graph_page([], 0)])
    assert find_leftovers("demo", SUBSCRIPTION, http=arm) == []
    methods = [(m, url.split("?")[0].rsplit("/", 2)[-2:]) for m, url, _ in arm.calls]
    assert methods == [
        ("GET", ["resourcegroups", "gpufleet-demo"]),
        ("POST", ["Microsoft.ResourceGraph", "resources"]),
    ]
    query = arm.calls[1][2]
    assert query["subscriptions"] == [SUBSCRIPTION] and query["query"] == cluster_query("demo")
    assert "tags['gpufleet:cluster'] == 'demo'" in query["query"]


def test_a_group_being_deleted_is_a_leftover_with_its_state():
    arm = FakeArm(
        groups={
            "gpufleet-demo": {
                "id": GROUP_ID,
                "name": "gpufleet-demo",
                "location": "eastus",
                "properties": {"provisioningState": "Deleting"},
            }
        },
        pages=[graph_page([row("demo-gpu-0", "gpufleet-demo")], 1)],
    )
    found = find_leftovers("demo", SUBSCRIPTION, http=arm)
    assert [str(item) for item in found] == [
        f"{GROUP_TYPE} {GROUP_ID} (eastus, Deleting)",
        f"microsoft.compute/virtualmachines {GROUP_ID}/providers/microsoft.compute/virtualmachines/"
        "demo-gpu-0 (eastus, Succeeded)",
    ]


def test_rows_of_a_deleted_group_are_the_graphs_lag_but_tagged_resources_elsewhere_are_leftovers():
    rows = [
        row("demo-gpu-0", "gpufleet-demo"),
        row("demo-data", "ml-data", "microsoft.storage/storageaccounts"),
    ]
    arm = FakeArm(pages=[graph_page(rows[:1], 2, skip="page1"), graph_page(rows[1:], 2)])
    found = find_leftovers("demo", SUBSCRIPTION, http=arm)
    assert [item.short_name for item in found] == ["demo-data"], found
    assert arm.calls[-1][2]["options"]["$skipToken"] == "page1", "the second page is asked for"


def test_a_failed_graph_query_names_the_permission():
    arm = FakeArm(fail={"ResourceGraph": (403, {"error": {"code": "AuthorizationFailed", "message": "no"}})})
    with pytest.raises(ProvisionError) as failed:
        find_leftovers("demo", SUBSCRIPTION, http=arm)
    assert "AuthorizationFailed" in failed.value.message and "Microsoft.ResourceGraph" in (
        failed.value.hint or ""
    )


def test_expired_clusters_from_resource_and_group_tags():
    rows = [
        {"id": "a", "cluster": "old", "expires": "2026-11-20T09:00:00Z"},
        {"id": "b", "cluster": "old", "expires": "2026-11-21T09:00:00Z"},
        {"id": "c", "cluster": "new", "expires": "2026-12-30T09:00:00Z"},
        {"id": "d", "cluster": "", "expires": "2026-11-20T09:00:00Z"},
    ]
    arm = FakeArm(pages=[graph_page(rows, 4)])
    expired = find_expired(SUBSCRIPTION, now=datetime(2026, 11, 27, tzinfo=UTC), http=arm)
    assert [(c.cluster, c.resources) for c in expired] == [("old", 2)]
    assert "isnotempty(tags['gpufleet:expires-at'])" in arm.calls[0][2]["query"]
