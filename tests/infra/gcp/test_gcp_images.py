"""Baked GCP images through a fake ``Http``: list (with paging and users), delete, the retention rule.

The answers have the shape of Compute Engine v1's ``images.list``
(https://cloud.google.com/compute/docs/reference/rest/v1/images/list) and ``disks.aggregatedList``
(https://cloud.google.com/compute/docs/reference/rest/v1/disks/aggregatedList): ``items``,
``nextPageToken``, per-zone ``disks`` with ``sourceImage`` and ``labels``. The values are made up here
(no project exists to capture from); the field names are the documented ones gpufleet reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.errors import ProvisionError
from gpufleet.infra.gcp import images
from gpufleet.infra.gcp.images import COMPUTE
from gpufleet.infra.images import to_prune

PROJECT = "test-project-1"
LINK = f"{COMPUTE}/projects/{PROJECT}/global/images"


def image(name: str, digest: str, created: str) -> dict[str, Any]:
    return {
        "kind": "compute#image",
        "name": name,
        "selfLink": f"{LINK}/{name}",
        "creationTimestamp": created,
        "status": "READY",
        "family": "gpufleet-baked",
        "labels": {
            "gpufleet-image": "baked",
            "gpufleet-image-hash": digest[:63],
            "gpufleet-image-base": "ubuntu-accelerator-2404-amd64-with-nvidia-580",
        },
    }


def disk(name: str, source: str, cluster: str | None) -> dict[str, Any]:
    return {
        "kind": "compute#disk",
        "name": name,
        "sourceImage": source,
        "labels": {"gpufleet-cluster": cluster} if cluster else {},
    }


class FakeCompute:
    """Answers the three calls from pages; records every call."""

    def __init__(self, image_pages: list[list[dict]], disks: dict[str, list[dict]]) -> None:
        self.image_pages = image_pages
        self.disks = disks
        self.calls: list[tuple[str, str, dict[str, str]]] = []
        self.deleted: list[str] = []

    def __call__(self, method: str, url: str, params: dict[str, str]) -> dict[str, Any]:
        self.calls.append((method, url, params))
        if method == "DELETE":
            self.deleted.append(url.rsplit("/", 1)[-1])
            return {"kind": "compute#operation", "status": "RUNNING"}
        if url == LINK:
            index = int(params.get("pageToken") or 0)
            page: dict[str, Any] = {"kind": "compute#imageList", "items": self.image_pages[index]}
            if index + 1 < len(self.image_pages):
                page["nextPageToken"] = str(index + 1)
            return page
        if url.endswith("/aggregated/disks"):
            return {"items": {zone: {"disks": found} for zone, found in self.disks.items()}}
        raise AssertionError(f"unexpected call {method} {url}")


@pytest.fixture
def compute() -> FakeCompute:
    return FakeCompute(
        [
            [image("gpufleet-baked-aaaa-1", "a" * 64, "2026-11-01T09:00:00.000-07:00")],
            [image("gpufleet-baked-bbbb-1", "b" * 64, "2026-11-03T09:00:00.000-07:00")],
        ],
        {
            "zones/us-central1-a": [
                disk("train-gpu-0", f"{LINK}/gpufleet-baked-aaaa-1", "train"),
                disk("scratch", f"{COMPUTE}/projects/ubuntu-os-cloud/global/images/ubuntu-2204", None),
            ],
            "zones/us-central1-b": [],
        },
    )


def test_list_follows_pages_filters_by_label_and_names_the_users(compute):
    found = images.list_images(PROJECT, http=compute)
    assert [i.id for i in found] == ["gpufleet-baked-bbbb-1", "gpufleet-baked-aaaa-1"], found
    assert found[1].used_by == ("train",) and found[0].used_by == (), found
    assert found[1].digest == "a" * 63 and found[1].base.startswith("ubuntu-accelerator"), found[1]
    listed = [params for method, url, params in compute.calls if url == LINK]
    assert listed == [
        {"filter": "labels.gpufleet-image=baked"},
        {"filter": "labels.gpufleet-image=baked", "pageToken": "1"},
    ]


def test_delete_is_refused_while_a_disk_was_made_from_the_image(compute):
    used = images.list_images(PROJECT, http=compute)[1]
    with pytest.raises(ProvisionError, match="in use by train"):
        images.delete_image(PROJECT, used, http=compute)
    assert compute.deleted == []
    free = images.list_images(PROJECT, http=compute)[0]
    assert images.delete_image(PROJECT, free, http=compute) == ["gcp image gpufleet-baked-bbbb-1 (running)"]
    assert compute.deleted == ["gpufleet-baked-bbbb-1"]


def test_retention_keeps_the_newest_and_anything_in_use(compute):
    found = images.list_images(PROJECT, http=compute)
    assert to_prune(found, referenced=set(), keep=1) == [], "the older one is in use by cluster train"
    assert to_prune(found, referenced=set(), keep=0) == [found[0]]
    assert to_prune(found, referenced={"b" * 64}, keep=0) == [], (
        "a cluster state records the newer one's hash"
    )
