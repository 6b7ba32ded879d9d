"""The GCP half of teardown's leftover check: what still exists in the project for a cluster.

After ``pulumi destroy``, teardown asks Cloud Asset Inventory (``resources:searchAll``) for resources of
the cluster. Two searches, because not every resource takes labels:
- ``labels.gpufleet-cluster:<name>``: VMs and their disks, Managed Lustre, Filestore, address ranges;
- ``description:<marker>``: networks, subnets, firewall rules, routers and placement policies, whose
  description ``GpuClusterGcp`` starts with ``gpufleet-cluster=<name>``.
Search matches words, so every result is checked again here for the exact label or marker: cluster
``demo`` never reports resources of ``demo-2``.

Plain HTTPS (urllib) carries the request; only the access token needs google-auth (Application Default
Credentials), imported when no token is passed in. Without it, ``EnvironmentProblem`` says how to fix.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra.tags import GCP_CLUSTER_LABEL
from gpufleet.lifecycle.leftovers import Leftover

SEARCH_URL = "https://cloudasset.googleapis.com/v1/projects/{project}/resources:searchAll"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
PAGE_SIZE = 500
_MARKER = re.compile(re.escape(GCP_CLUSTER_LABEL) + r"=([a-z0-9-]+)")


# Fetch(url) -> the decoded JSON body. Tests pass canned pages; the default speaks HTTPS.
Fetch = Callable[[str], Mapping[str, Any]]


def search_queries(cluster: str) -> list[str]:
    """The two Cloud Asset queries for a cluster: by label, and by the description marker."""
    return [f"labels.{GCP_CLUSTER_LABEL}:{cluster}", f'description:"{GCP_CLUSTER_LABEL}={cluster}"']


def search_url(project: str, query: str, page_token: str | None = None) -> str:
    params = {"query": query, "pageSize": str(PAGE_SIZE)}
    if page_token:
        params["pageToken"] = page_token
    return (
        SEARCH_URL.format(project=urllib.parse.quote(project, safe="")) + "?" + urllib.parse.urlencode(params)
    )


def belongs_to(result: Mapping[str, Any], cluster: str) -> bool:
    """True when a search result carries exactly this cluster's label or description marker."""
    labels = result.get("labels") or {}
    if labels.get(GCP_CLUSTER_LABEL) == cluster:
        return True
    return any(match == cluster for match in _MARKER.findall(result.get("description") or ""))


def parse_results(page: Mapping[str, Any], cluster: str) -> Iterator[Leftover]:
    """The leftovers on one page of ``searchAll`` results (those of other clusters dropped)."""
    for result in page.get("results") or []:
        if not belongs_to(result, cluster):
            continue
        where = [str(result[key]) for key in ("location", "state") if result.get(key)]
        yield Leftover(
            kind=str(result.get("assetType", "")), id=str(result.get("name", "")), detail=", ".join(where)
        )


def find_leftovers(
    cluster: str, project: str, *, access_token: str | None = None, fetch: Fetch | None = None
) -> list[Leftover]:
    """Every resource in ``project`` that still belongs to ``cluster``, sorted by type and name."""
    if fetch is None:
        fetch = _https_fetch(access_token or default_access_token())
    found: dict[str, Leftover] = {}
    for query in search_queries(cluster):
        token: str | None = None
        while True:
            page = fetch(search_url(project, query, token))
            for leftover in parse_results(page, cluster):
                found.setdefault(leftover.id, leftover)
            token = page.get("nextPageToken") or None
            if not token:
                break
    return sorted(found.values(), key=lambda item: (item.kind, item.id))


def default_access_token() -> str:
    """An OAuth access token from Application Default Credentials (google-auth)."""
    try:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        raise EnvironmentProblem(
            "checking GCP for leftovers needs google-auth, which is not installed",
            hint="pip install google-auth, or pass a token from 'gcloud auth print-access-token'",
        ) from None
    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as exc:
        raise EnvironmentProblem(
            f"no Google credentials for the leftover check: {exc}",
            hint="run 'gcloud auth application-default login', or use Workload Identity Federation in CI",
        ) from None
    return str(credentials.token)


def _https_fetch(token: str) -> Fetch:
    def fetch(url: str) -> Mapping[str, Any]:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")[:500]
            hint = (
                "enable the API: gcloud services enable cloudasset.googleapis.com"
                if "SERVICE_DISABLED" in body or "has not been used" in body
                else "the caller needs cloudasset.assets.searchAllResources (roles/cloudasset.viewer)"
            )
            raise ProvisionError(f"Cloud Asset search failed (HTTP {exc.code}): {body}", hint=hint) from None
        except urllib.error.URLError as exc:
            raise ProvisionError(f"Cloud Asset search failed: {exc.reason}") from None

    return fetch
