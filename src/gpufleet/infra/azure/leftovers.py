"""After ``pulumi destroy``: what still exists in the Azure subscription for a cluster.

Two reads, through Azure Resource Manager's REST API (``arm.py``):
1. the cluster's resource group, ``GET /subscriptions/{id}/resourcegroups/gpufleet-<cluster>`` (Resource
   Groups - Get, api-version 2021-04-01, ``GROUP_DOC``): 200 means it is still there (a group being
   deleted answers 200 with ``properties.provisioningState: Deleting``), 404 that it is gone;
2. a tag query across the subscription with Azure Resource Graph (``POST /providers/Microsoft.ResourceGraph/
   resources``, api-version 2022-10-01, ``GRAPH_DOC``), for resources and resource groups whose
   ``gpufleet:cluster`` tag is the cluster's, wherever they are: something made elsewhere and tagged, or
   left in another group. The answer is ``{totalRecords, count, resultTruncated, $skipToken, data: [...]}``;
   a ``$skipToken`` asks for the next page (``options.$skipToken``), 1,000 rows a page.
Resource Graph lags a deletion ("the data is typically updated within seconds" to minutes), so a row whose
resource group the first read found gone is dropped: deleting a group deletes what is in it. What remains
is polled by ``infra.leftovers.settle``. Everything here only reads.

``find_expired(subscription)`` is the reaper's eye, as on AWS and GCP: clusters whose
``gpufleet:expires-at`` tag (on resource groups and resources) has passed, from one Resource Graph query.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from gpufleet.errors import ProvisionError
from gpufleet.infra.azure.arm import ARM, Http, error_message, session_http
from gpufleet.infra.leftovers import ExpiredCluster, Leftover, expired_clusters
from gpufleet.infra.tags import AZURE_CLUSTER_TAG, AZURE_EXPIRES_TAG

GROUP_DOC = "https://learn.microsoft.com/en-us/rest/api/resources/resource-groups/get"
GRAPH_DOC = "https://learn.microsoft.com/en-us/rest/api/azureresourcegraph/resourcegraph/resources/resources"
GROUP_API = "2021-04-01"
GRAPH_API = "2022-10-01"
GRAPH_URL = f"{ARM}/providers/Microsoft.ResourceGraph/resources?api-version={GRAPH_API}"
PAGE = 1000
GROUP_TYPE = "microsoft.resources/subscriptions/resourcegroups"


def group_name(cluster: str) -> str:
    from gpufleet.infra.azure.component import resource_group_name

    return resource_group_name(cluster)


def _kql_string(value: str) -> str:
    """A KQL string literal (cluster names are [a-z0-9-], but quote anyway)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cluster_query(cluster: str) -> str:
    """Resources and resource groups tagged for ``cluster``, one row each."""
    tag = f"tags[{_kql_string(AZURE_CLUSTER_TAG)}]"
    project = "project id, type, location, resourceGroup, state = tostring(properties.provisioningState)"
    return (
        f"resources | where {tag} == {_kql_string(cluster)} | {project} "
        f"| union (resourcecontainers | where type == '{GROUP_TYPE}' and {tag} == {_kql_string(cluster)} "
        f"| {project})"
    )


def expiry_query() -> str:
    """Every resource and resource group that carries an expiry tag, with its cluster and expiry."""
    cluster, expires = f"tags[{_kql_string(AZURE_CLUSTER_TAG)}]", f"tags[{_kql_string(AZURE_EXPIRES_TAG)}]"
    project = f"project id, cluster = tostring({cluster}), expires = tostring({expires})"
    return (
        f"resources | where isnotempty({expires}) | {project} "
        f"| union (resourcecontainers | where type == '{GROUP_TYPE}' and isnotempty({expires}) | {project})"
    )


def graph(http: Http, subscription: str, query: str) -> Iterator[dict[str, Any]]:
    """Every row of a Resource Graph query over one subscription, all pages."""
    skip: str | None = None
    while True:
        options: dict[str, Any] = {"$top": PAGE, "resultFormat": "objectArray"}
        if skip:
            options["$skipToken"] = skip
        status, answer = http(
            "POST", GRAPH_URL, {"subscriptions": [subscription], "query": query, "options": options}
        )
        if status >= 400:
            raise ProvisionError(
                f"Azure Resource Graph query failed ({status}): {error_message(answer)}",
                hint="the caller needs Microsoft.ResourceGraph/resources/read and Reader on the subscription "
                "(examples/ci/azure/deployer-role.json has both)",
            )
        yield from answer.get("data") or []
        skip = answer.get("$skipToken")
        if not skip:
            return


def find_leftovers(cluster: str, subscription: str, *, http: Http | None = None) -> list[Leftover]:
    """Everything in ``subscription`` still there for ``cluster``, the resource group first."""
    http = http or session_http("the leftover check")
    group = group_name(cluster)
    url = f"{ARM}/subscriptions/{subscription}/resourcegroups/{group}?api-version={GROUP_API}"
    status, answer = http("GET", url, None)
    found: dict[str, Leftover] = {}
    group_gone = status == 404
    if status == 200:
        state = (answer.get("properties") or {}).get("provisioningState", "")
        rid = str(answer.get("id") or f"/subscriptions/{subscription}/resourceGroups/{group}")
        found[rid.lower()] = Leftover(
            kind=GROUP_TYPE, id=rid, detail=", ".join(x for x in (answer.get("location"), state) if x)
        )
    elif not group_gone:
        raise ProvisionError(
            f"reading resource group {group} failed ({status}): {error_message(answer)}",
            hint="the caller needs Microsoft.Resources/subscriptions/resourceGroups/read (Reader)",
        )
    for row in graph(http, subscription, cluster_query(cluster)):
        rid = str(row.get("id", ""))
        if group_gone and str(row.get("resourceGroup", "")).lower() == group.lower():
            continue  # the group is gone, and with it what was in it; the graph has not caught up
        detail = ", ".join(str(x) for x in (row.get("location"), row.get("state")) if x)
        found.setdefault(rid.lower(), Leftover(kind=str(row.get("type", "")), id=rid, detail=detail))
    return sorted(found.values(), key=lambda item: (item.kind != GROUP_TYPE, item.kind, item.id))


def find_expired(
    subscription: str, *, now: datetime | None = None, http: Http | None = None
) -> list[ExpiredCluster]:
    """Clusters in ``subscription`` with at least one tagged resource (or group) whose expiry has passed."""
    http = http or session_http("the expiry sweep")
    pairs = [
        (row.get("cluster") or None, row.get("expires") or None)
        for row in graph(http, subscription, expiry_query())
    ]
    return expired_clusters(pairs, now or datetime.now(UTC))
