"""Baked images in one GCP project (``gpufleet image list / delete``, ``up``'s look-up, the retention rule).

An image is gpufleet's when it is labelled ``gpufleet-image=baked`` (``tags.gcp_image_labels``).
Its users are the disks made from it (a VM's boot disk records its ``sourceImage``), named by their
``gpufleet-cluster`` label. Compute Engine's REST API (v1: ``images.list``, ``images.delete``,
``disks.aggregatedList``) is called through google-auth's authorized session on Application Default
Credentials, so no other client library is needed; tests pass a fake ``Http``.

``GcpImages`` is what the bakers (``gpufleet.bake``) and the retention rule ask of GCP about its images
(``gpufleet.infra.images.BakeSource``): the base image and builder of a bake, its builder program, and
these look-ups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra.images import BUILDER_ROLES, BakeRequest, CloudImage, bake_group
from gpufleet.infra.tags import (
    GCP_CLUSTER_LABEL,
    GCP_IMAGE_BASE_LABEL,
    GCP_IMAGE_HASH_LABEL,
    GCP_IMAGE_LABEL,
)
from gpufleet.spec.model import ClusterSpec, GcpProvider, NodeGroup

if TYPE_CHECKING:
    from google.auth.transport.requests import AuthorizedSession

COMPUTE = "https://compute.googleapis.com/compute/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Http(method, url, params) -> the JSON answer; raises ProvisionError on an error answer.
Http = Callable[[str, str, dict[str, str]], dict[str, Any]]


def authorized_session(purpose: str) -> AuthorizedSession:
    """A requests session on Application Default Credentials; ``purpose`` names the calls in the error."""
    import google.auth
    import google.auth.exceptions
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise EnvironmentProblem(
            f"no Google credentials for {purpose}: {exc}",
            hint="run 'gcloud auth application-default login', or use Workload Identity Federation in CI",
        ) from None
    return AuthorizedSession(credentials)


def session_http() -> Http:
    """An ``Http`` on Application Default Credentials."""
    session = authorized_session("the image calls")

    def call(method: str, url: str, params: dict[str, str]) -> dict[str, Any]:
        answer = session.request(method, url, params=params, timeout=60)
        if answer.status_code >= 400:
            raise ProvisionError(
                f"Compute Engine {method} {url} failed ({answer.status_code}): {answer.text[:400]}"
            )
        return dict(answer.json())

    return call


def _pages(http: Http, url: str, params: dict[str, str]) -> Iterator[dict[str, Any]]:
    token = ""
    while True:
        page = http("GET", url, {**params, **({"pageToken": token} if token else {})})
        yield page
        token = page.get("nextPageToken") or ""
        if not token:
            return


def list_images(project: str, *, http: Http | None = None) -> list[CloudImage]:
    """gpufleet's baked images in ``project``, newest first, each with the clusters whose disks use it."""
    http = http or session_http()
    found = [
        image
        for page in _pages(
            http, f"{COMPUTE}/projects/{project}/global/images", {"filter": f"labels.{GCP_IMAGE_LABEL}=baked"}
        )
        for image in page.get("items", [])
    ]
    users = _users(http, project) if found else {}
    result = []
    for image in found:
        labels = image.get("labels") or {}
        result.append(
            CloudImage(
                id=image["name"],
                name=image.get("selfLink", image["name"]),
                digest=labels.get(GCP_IMAGE_HASH_LABEL, ""),
                base=labels.get(GCP_IMAGE_BASE_LABEL, ""),
                created=image.get("creationTimestamp", ""),
                used_by=tuple(sorted(users.get(image["name"], set()))),
            )
        )
    return sorted(result, key=lambda image: image.created, reverse=True)


def _users(http: Http, project: str) -> dict[str, set[str]]:
    """Image name -> the clusters (or bare disk names) with a disk made from it, in every zone."""
    users: dict[str, set[str]] = {}
    url = f"{COMPUTE}/projects/{project}/aggregated/disks"
    for page in _pages(http, url, {"returnPartialSuccess": "true"}):
        for scoped in (page.get("items") or {}).values():
            for disk in scoped.get("disks") or []:
                source = disk.get("sourceImage") or ""
                if "/global/images/" not in source:
                    continue
                who = (disk.get("labels") or {}).get(GCP_CLUSTER_LABEL) or f"disk {disk.get('name', '?')}"
                users.setdefault(source.rsplit("/", 1)[-1], set()).add(who)
    return users


def delete_image(project: str, image: CloudImage, *, http: Http | None = None) -> list[str]:
    """Delete the image; refused while any disk was made from it."""
    http = http or session_http()
    users = _users(http, project).get(image.id)
    if users:
        raise ProvisionError(
            f"baked image {image.id} is in use by {', '.join(sorted(users))}; not deleted",
            hint="take those clusters down first ('gpufleet down SPEC'), then delete the image",
        )
    operation = http("DELETE", f"{COMPUTE}/projects/{project}/global/images/{image.id}", {})
    return [f"gcp image {image.id} ({operation.get('status', 'requested').lower()})"]


def _provider(spec: ClusterSpec) -> GcpProvider:
    assert isinstance(spec.provider, GcpProvider)
    return spec.provider


class GcpImages:
    """Baked GCP images: what a bake starts from and makes (``ImageBuilderGcp``), and where they are found."""

    # 8 vCPUs for the DKMS and nccl-tests builds; offered in every region with GPUs (docs/gcp.md).
    builder_cpu_type = "n2-standard-8"

    def bake_base(self, spec: ClusterSpec) -> str:
        from gpufleet.infra.gcp.compute import base_image

        return base_image(spec, bake_group(spec).instance_type)

    def bake_host(self, spec: ClusterSpec, group: NodeGroup) -> dict[str, Any]:
        from gpufleet.catalog import load_catalog
        from gpufleet.catalog.gcp import nic_layout
        from gpufleet.infra.gcp.compute import image_manifest
        from gpufleet.infra.outputs import host_record

        item = load_catalog().get(group.instance_type)
        return host_record(
            name=f"{spec.name}-builder",
            roles=BUILDER_ROLES,
            private_ip="",
            instance_type=group.instance_type,
            item=item,
            fabric_interfaces=nic_layout(spec, group, item).gpu_nics,
            image=image_manifest(spec, group.instance_type),
        )

    def builder_program(self, request: BakeRequest) -> dict[str, Any]:
        from gpufleet.infra.gcp.image_builder import ImageBuilderGcp

        return ImageBuilderGcp(request.name, request).stack_outputs

    def image_source(self, outputs: dict[str, Any]) -> str:
        return str(outputs["boot_disk"])

    def image_scope(self, spec: ClusterSpec) -> str:
        return _provider(spec).project

    def baked_by_invoke(self, spec: ClusterSpec, digest: str) -> CloudImage | None:
        import pulumi_gcp as gcp

        found = gcp.compute.get_images(
            # a label value holds 63 characters: the hash's first 63 (gpufleet.infra.images.matches)
            filter=f"labels.{GCP_IMAGE_HASH_LABEL}={digest[:63]}",
            project=_provider(spec).project,
        )
        if not found.images:
            return None
        newest = max(found.images, key=lambda image: image.creation_timestamp)
        labels = newest.labels or {}
        return CloudImage(
            id=newest.name,
            name=newest.self_link,
            digest=labels.get(GCP_IMAGE_HASH_LABEL, digest[:63]),
            base=labels.get(GCP_IMAGE_BASE_LABEL, ""),
            created=newest.creation_timestamp,
        )

    def list_images(self, scope: str) -> list[CloudImage]:
        return list_images(scope)

    def delete_image(self, scope: str, image: CloudImage) -> list[str]:
        return delete_image(scope, image)
