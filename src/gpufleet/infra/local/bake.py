"""Baked node images of the local backend: what they are keyed by, and the record podman keeps of them.

A baked image is a node with every role's install phase applied (``playbooks/bake.yml --tags install``),
committed with ``podman commit`` (``gpufleet.bake.local`` makes it). It is keyed by a content hash of
what went into it (``gpufleet.infra.images``): every file under ``roles/`` and ``playbooks/`` that
Ansible reads (not READMEs, not role tests) and the pins (the spec's ``software`` block, the local
provider's settings but the node sizes, and the node image it was made from). The record is the
image's own labels, so ``list`` and ``delete`` need no other store, and ``up`` finds an image by the hash
alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpufleet.errors import ProvisionError
from gpufleet.infra.images import CONFIGURE_ONLY_SOFTWARE, the_one
from gpufleet.infra.local.image import node_image_ref
from gpufleet.infra.local.podman import Podman
from gpufleet.spec.model import ClusterSpec, LocalProvider

BAKED_IMAGE = "localhost/gpufleet-baked"
KIND_LABEL = "gpufleet.image"  # "baked" on baked images ("node" on the plain node image)
HASH_LABEL = "gpufleet.bake.hash"
BASE_LABEL = "gpufleet.bake.base"
CREATED_LABEL = "gpufleet.bake.created"
PINS_LABEL = "gpufleet.bake.pins"
CLUSTER_LABEL = "gpufleet.cluster"

# Provider settings that only reach slurm.conf (configure), not what is installed.
# What only the nodes' containers or Slurm's declarations use, never the install phase: net_admin is a
# capability each node's container gets at start (gpufleet.infra.local.cluster), read by no role.
_CONFIGURE_ONLY_PROVIDER_FIELDS = frozenset({"node_cpus", "node_memory_mb", "net_admin"})


def provider_of(spec: ClusterSpec) -> LocalProvider:
    """The local provider's settings of a spec (the node image's release and mirror)."""
    provider = spec.provider
    assert isinstance(provider, LocalProvider)
    return provider


def bake_pins(spec: ClusterSpec) -> dict[str, Any]:
    """Everything besides the role files that decides what the install phase puts on a node."""
    provider = provider_of(spec)
    return {
        "software": spec.software.model_dump(mode="json", exclude=set(CONFIGURE_ONLY_SOFTWARE)),
        "provider": provider.model_dump(mode="json", exclude=set(_CONFIGURE_ONLY_PROVIDER_FIELDS)),
        "base_image": node_image_ref(provider.debian_release, provider.mirror),
    }


def image_ref(release: str, digest: str) -> str:
    return f"{BAKED_IMAGE}:{release}-{digest[:12]}"


@dataclass(frozen=True)
class BakedImage:
    ref: str
    image_id: str
    digest: str
    base: str
    created: str
    size_bytes: int
    pins: dict[str, Any]
    used_by: tuple[str, ...] = ()  # clusters whose nodes run from it

    def said(self, verb: str) -> str:
        return f"{self.ref}: {verb}; hash {self.digest[:12]}, {self.size_bytes / 1e6:.0f} MB"

    def row(self) -> dict[str, str]:
        return {
            "name": self.ref,
            "hash": self.digest[:12],
            "base": self.base,
            "created": self.created,
            "size": f"{self.size_bytes / 1e6:.0f} MB",
            "used by": ", ".join(self.used_by) or "-",
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.ref,
            "id": self.image_id[:12],
            "hash": self.digest,
            "base": self.base,
            "created": self.created,
            "size_bytes": self.size_bytes,
            "pins": self.pins,
            "used_by": list(self.used_by),
        }


def bake_labels(digest: str, base: str, pins: dict[str, Any]) -> dict[str, str]:
    return {
        KIND_LABEL: "baked",
        HASH_LABEL: digest,
        BASE_LABEL: base,
        CREATED_LABEL: datetime.now(UTC).isoformat(timespec="seconds"),
        PINS_LABEL: json.dumps(pins, sort_keys=True, separators=(",", ":")),
        # The builder's own cluster label must not follow the image into the nodes made from it.
        CLUSTER_LABEL: "",
    }


def list_images(podman: Podman) -> list[BakedImage]:
    """Every baked image in podman's store, newest first, with the clusters that use each."""
    listed = podman.run(
        "images", "--filter", f"label={KIND_LABEL}=baked", "--format", "json", what="listing baked images"
    )
    users = _clusters_by_image(podman)
    images = []
    for entry in json.loads(listed.stdout or "[]"):
        labels = entry.get("Labels") or {}
        names = entry.get("Names") or [entry["Id"][:12]]
        try:
            pins = json.loads(labels.get(PINS_LABEL) or "{}")
        except ValueError:
            pins = {}
        images.append(
            BakedImage(
                ref=names[0],
                image_id=entry["Id"],
                digest=labels.get(HASH_LABEL, ""),
                base=labels.get(BASE_LABEL, ""),
                created=labels.get(CREATED_LABEL) or entry.get("CreatedAt", ""),
                size_bytes=int(entry.get("Size") or 0),
                pins=pins,
                used_by=tuple(sorted(users.get(entry["Id"], set()))),
            )
        )
    return sorted(images, key=lambda image: image.created, reverse=True)


def _clusters_by_image(podman: Podman) -> dict[str, set[str]]:
    """Image id -> names of the clusters with a container (running or not) made from it."""
    listed = podman.run("ps", "-a", "--format", "json", what="listing containers")
    users: dict[str, set[str]] = {}
    for container in json.loads(listed.stdout or "[]"):
        cluster = (container.get("Labels") or {}).get(CLUSTER_LABEL) or "(not a gpufleet cluster)"
        users.setdefault(container.get("ImageID", ""), set()).add(cluster)
    return users


def find_image(podman: Podman, digest: str) -> BakedImage | None:
    """The baked image with this content hash, if podman has it."""
    for image in list_images(podman):
        if image.digest == digest:
            return image
    return None


def resolve(images: list[BakedImage], name: str) -> BakedImage:
    """The one image ``name`` means: its full name, its tag, or a prefix (6+ characters) of its hash or id."""
    wanted = name.strip()
    matches = [
        image
        for image in images
        if wanted in (image.ref, image.ref.removeprefix("localhost/"), image.ref.split(":", 1)[-1])
        or (len(wanted) >= 6 and (image.digest.startswith(wanted) or image.image_id.startswith(wanted)))
    ]
    return the_one(
        matches,
        images,
        name,
        lambda image: image.ref,
        where="here",
        hint="give the full name (gpufleet image list)",
    )


def delete_image(podman: Podman, name: str) -> BakedImage:
    """Remove a baked image; refuse while any container, of any cluster, was made from it."""
    image = resolve(list_images(podman), name)
    if image.used_by:
        raise ProvisionError(
            f"baked image {image.ref} is in use by cluster(s) {', '.join(image.used_by)}; not removed",
            hint="take those clusters down first ('gpufleet down SPEC'), then delete the image",
        )
    # Without --force: podman itself refuses too if a container appeared since the check above.
    podman.run("rmi", image.image_id, what=f"removing image {image.ref}")
    return image
