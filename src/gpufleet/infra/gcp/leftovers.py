"""After ``pulumi destroy``: what still exists in the GCP project for a cluster.

Teardown asks Cloud Asset Inventory (``SearchAllResources``, through the ``google-cloud-asset`` client
library and its own pager) for resources of the cluster. Two searches, because not every resource takes
labels:
- ``labels.gpufleet-cluster:<name>``: VMs and their disks, Managed Lustre, Filestore, address ranges;
- ``description:<marker>``: networks, subnets, firewall rules, routers and placement policies, whose
  description ``GpuClusterGcp`` starts with ``gpufleet-cluster=<name>``.
Search matches words, so every result is checked again here for the exact label or marker: cluster
``demo`` never reports resources of ``demo-2``. Cloud Asset lags a deletion, so each result is then
read from its own API (Compute Engine, Filestore, Managed Lustre): one that answers 404 is gone.
Credentials are Application Default Credentials; without them, or without the API, the failure says how
to fix it. Everything here only reads.

A labelled result whose ``gpufleet-cluster-id`` is not the cluster's belongs to another cluster of the
same name and is skipped (``tags.same_cluster``); resources that take no labels carry no id (their names
are unique in a project, so two live clusters of one name cannot share a project anyway).

``find_expired(project)`` is the reaper's eye, as on AWS: clusters (a name and an id) whose
``gpufleet-expires-at`` label (on VMs, disks, filesystems, address ranges) has passed, from one search for
the label's presence. The expiry is the VMs' label when the cluster has a VM (every ``pulumi up``
sets their labels, running or stopped), else the latest of the rest, never the earliest (AWS audit
2026-11-27 H1, which holds here for any resource an edit did not reach).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra.leftovers import ExpiredCluster, ExpiryTag, Leftover, expired_clusters
from gpufleet.infra.tags import GCP_CLUSTER_ID_LABEL, GCP_CLUSTER_LABEL, GCP_EXPIRES_LABEL, same_cluster

if TYPE_CHECKING:
    from google.cloud.asset_v1 import AssetServiceClient

PAGE_SIZE = 500
VM_ASSET = "compute.googleapis.com/Instance"
_MARKER = re.compile(re.escape(GCP_CLUSTER_LABEL) + r"=([a-z0-9-]+)")

# Search(scope, query) -> every result (``ResourceSearchResult``, all pages). Tests pass canned ones.
Search = Callable[[str, str], Iterable[Any]]


def search_queries(cluster: str) -> list[str]:
    """The two Cloud Asset queries for a cluster: by label, and by the description marker."""
    return [f"labels.{GCP_CLUSTER_LABEL}:{cluster}", f'description:"{GCP_CLUSTER_LABEL}={cluster}"']


def belongs_to(result: Any, cluster: str) -> bool:
    """True when a search result carries exactly this cluster's label or description marker."""
    if dict(result.labels or {}).get(GCP_CLUSTER_LABEL) == cluster:
        return True
    return any(match == cluster for match in _MARKER.findall(result.description or ""))


def parse_results(results: Iterable[Any], cluster: str, cluster_id: str | None = None) -> Iterator[Leftover]:
    """The leftovers among search results (those of other clusters, or of another id, dropped)."""
    for result in results:
        if not belongs_to(result, cluster):
            continue
        if not same_cluster(dict(result.labels or {}).get(GCP_CLUSTER_ID_LABEL), cluster_id):
            continue
        where = [str(value) for value in (result.location, result.state) if value]
        yield Leftover(kind=str(result.asset_type), id=str(result.name), detail=", ".join(where))


def find_leftovers(
    cluster: str,
    project: str,
    *,
    search: Search | None = None,
    get: Get | None = None,
    cluster_id: str | None = None,
) -> list[Leftover]:
    """Every resource in ``project`` that still belongs to ``cluster``, sorted by type and name.

    With ``get`` (always, unless a test passes its own ``search`` and no ``get``) each result is asked of
    its own API: one that answers 404 is gone, whatever Cloud Asset still says."""
    if search is None:
        search = client_search(asset_client())
        get = get or session_get()
    found: dict[str, Leftover] = {}
    for query in search_queries(cluster):
        for leftover in parse_results(search(f"projects/{project}", query), cluster, cluster_id):
            found.setdefault(leftover.id, leftover)
    listed = sorted(found.values(), key=lambda item: (item.kind, item.id))
    return [item for item in listed if get is None or still_there(item, get)]


# Where a Cloud Asset full resource name (//SERVICE/PATH, "Resource name format",
# https://cloud.google.com/asset-inventory/docs/resource-name-format, read 2026-11-24) is read from its own
# API: GET ROOT/PATH. Compute Engine v1 (https://cloud.google.com/compute/docs/reference/rest/v1, e.g.
# instances.get: GET .../compute/v1/projects/{project}/zones/{zone}/instances/{instance}), Filestore v1
# (projects.locations.instances.get: GET https://file.googleapis.com/v1/{name}), Managed Lustre v1
# (projects.locations.instances.get: GET https://lustre.googleapis.com/v1/{name}), all read 2026-11-24.
# A deleted resource answers 404. A resource of another service stays a leftover (nothing asks it).
API_ROOTS = {
    "compute.googleapis.com": "https://compute.googleapis.com/compute/v1",
    "file.googleapis.com": "https://file.googleapis.com/v1",
    "lustre.googleapis.com": "https://lustre.googleapis.com/v1",
}

# Get(url) -> (HTTP status, the JSON body or None). Tests pass a fake of the REST API.
Get = Callable[[str], "tuple[int, dict[str, Any] | None]"]


def resource_url(name: str) -> str | None:
    """The GET URL of a Cloud Asset full resource name, or None for a service not in ``API_ROOTS``."""
    service, _, path = name.removeprefix("//").partition("/")
    root = API_ROOTS.get(service)
    return f"{root}/{path}" if root and path else None


def still_there(item: Leftover, get: Get) -> bool:
    """False only when the resource's own API answers 404 (deleted). Any other answer keeps it listed:
    a stopped VM (status TERMINATED) or a filesystem in DELETING still exists; a 403 proves nothing."""
    url = resource_url(item.id)
    return url is None or get(url)[0] != 404


def session_get() -> Get:
    """A ``Get`` on Application Default Credentials."""
    from gpufleet.infra.gcp.images import authorized_session

    session = authorized_session("the leftover check")

    def get(url: str) -> tuple[int, dict[str, Any] | None]:
        answer = session.get(url, timeout=60)
        try:
            body = answer.json()
        except ValueError:
            body = None
        return answer.status_code, body if isinstance(body, dict) else None

    return get


def find_expired(
    project: str, *, now: datetime | None = None, search: Search | None = None
) -> list[ExpiredCluster]:
    """Clusters in ``project`` whose expiry has passed (see the module doc for which labels say so)."""
    search = search or client_search(asset_client())
    found = []
    for result in search(f"projects/{project}", f"labels.{GCP_EXPIRES_LABEL}:*"):
        labels = dict(result.labels or {})
        live = str(result.asset_type) == VM_ASSET  # a VM's labels are set by every up, stopped or not
        found.append(
            ExpiryTag(
                labels.get(GCP_CLUSTER_LABEL),
                labels.get(GCP_EXPIRES_LABEL),
                labels.get(GCP_CLUSTER_ID_LABEL),
                live,
            )
        )
    return expired_clusters(found, now or datetime.now(UTC))


def asset_client() -> AssetServiceClient:
    """A Cloud Asset client on Application Default Credentials."""
    import google.auth.exceptions
    from google.cloud import asset_v1

    try:
        return asset_v1.AssetServiceClient()
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise EnvironmentProblem(
            f"no Google credentials for the leftover check: {exc}",
            hint="run 'gcloud auth application-default login', or use Workload Identity Federation in CI",
        ) from None


def client_search(client: AssetServiceClient) -> Search:
    """``SearchAllResources`` through the client; its pager fetches the further pages."""
    from google.api_core import exceptions

    def search(scope: str, query: str) -> Iterator[Any]:
        request = {"scope": scope, "query": query, "page_size": PAGE_SIZE}
        try:
            yield from client.search_all_resources(request=request)
        except exceptions.GoogleAPICallError as exc:
            text = str(exc)
            hint = (
                "enable the API: gcloud services enable cloudasset.googleapis.com"
                if "SERVICE_DISABLED" in text or "has not been used" in text
                else "the caller needs cloudasset.assets.searchAllResources (roles/cloudasset.viewer)"
            )
            raise ProvisionError(f"Cloud Asset search failed: {text[:500]}", hint=hint) from None

    return search
