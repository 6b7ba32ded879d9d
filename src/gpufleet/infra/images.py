"""Baked node images on every backend: the content hash that keys them, the bake switch of ``configure``,
and the retention rule of cloud images.

A baked image holds every role's install phase (``playbooks/bake.yml --tags install``). It is keyed by a
content hash of what went into it: every file under ``roles/`` and ``playbooks/`` that Ansible reads (not
READMEs, not role tests) and the backend's pins (``bake_pins``: the spec's ``software`` block, the image it
starts from, what the builder node looks like to the roles). ``up`` finds an image by that hash alone;
``configure`` skips the install phase when the inventory's ``gpufleet_baked_image_hash`` is the hash of
the roles and pins now (``gpufleet.bake.baker.baked_and_current``). The local backend keeps its images
in podman (``gpufleet.infra.local.bake``), the clouds as AMIs and GCP images (``gpufleet.bake.cloud``)
with the record in their tags or labels (``gpufleet.infra.tags``). A leaf: it imports no backend.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.errors import ProvisionError, StateError

# Folders the playbooks read, relative to the project root. Within them, files Ansible never reads
# (documentation, role test scaffolding, caches, hidden files) do not change what is installed.
HASHED_FOLDERS = ("roles", "playbooks")
_SKIPPED_PARTS = frozenset({"tests", "molecule", "__pycache__"})
_SKIPPED_SUFFIXES = (".md", ".pyc", "~")
# The inventory variable that records the hash every node of a cluster runs from (null: not baked).
HASH_VAR = "gpufleet_baked_image_hash"
# Spec software fields only the configure phase reads: they do not key a baked image. container_image is
# staged on the shared filesystem by roles/containers' configure tasks (docs/containers.md).
CONFIGURE_ONLY_SOFTWARE = frozenset({"container_image"})
# Cloud images kept per base image whatever else holds (the retention rule, docs/aws.md).
KEEP_NEWEST = 2


def hashed_files(root: Path) -> list[Path]:
    """The files whose content keys a baked image, sorted by their path under ``root``."""
    found = []
    for folder in HASHED_FOLDERS:
        for path in (root / folder).rglob("*"):
            relative = path.relative_to(root)
            if not path.is_file() or any(part.startswith(".") for part in relative.parts):
                continue
            if _SKIPPED_PARTS.intersection(relative.parts[:-1]) or path.name.endswith(_SKIPPED_SUFFIXES):
                continue
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def content_hash(root: Path, pins: dict[str, Any]) -> str:
    """SHA-256 over each hashed file's path and bytes, then the pins as canonical JSON."""
    digest = hashlib.sha256()
    for path in hashed_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(json.dumps(pins, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class CloudImage:
    """An AMI or a GCP image that gpufleet baked, as its tags or labels record it."""

    id: str  # ami-... / the image's name on GCP
    name: str
    digest: str  # the content hash (on GCP, as much of it as a label holds)
    base: str
    created: str  # ISO 8601
    snapshots: tuple[str, ...] = ()  # AWS: the EBS snapshots behind the AMI
    used_by: tuple[str, ...] = ()  # clusters with a live instance booted from it

    @property
    def ref(self) -> str:
        """How ``gpufleet image delete`` names it: its id."""
        return self.id

    def said(self, verb: str) -> str:
        return f"{self.id} ({self.name}): {verb}; hash {self.digest[:12]}"

    def row(self) -> dict[str, str]:
        return {
            "id": self.id,
            "hash": self.digest[:12],
            "base": self.base,
            "created": self.created,
            "used by": ", ".join(self.used_by) or "-",
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "hash": self.digest,
            "base": self.base,
            "created": self.created,
            "snapshots": list(self.snapshots),
            "used_by": list(self.used_by),
        }


def matches(image: CloudImage, digest: str) -> bool:
    """Whether ``image`` was baked from ``digest`` (a GCP label holds only the first 63 characters)."""
    return bool(image.digest) and digest.startswith(image.digest)


def newest_of(found: Iterable[CloudImage], digest: str) -> CloudImage | None:
    """The first image of ``found`` (listed newest first) baked from ``digest``, or None."""
    return next((image for image in found if matches(image, digest)), None)


def referenced_hashes(root: Path | None = None) -> set[str]:
    """The baked-image hashes the clusters made on this machine run from (their inventories record it);
    raises when one of those inventories cannot be read."""
    from gpufleet.inventory.model import Inventory
    from gpufleet.state import ClusterState, state_root

    root = root or state_root()
    found: set[str] = set()
    for folder in sorted(root.iterdir()) if root.exists() else []:
        inventory_file = ClusterState(name=folder.name, root=folder).inventory_file
        if not folder.is_dir() or not inventory_file.exists():
            continue
        # An inventory that cannot be read raises (SpecError names it): a cluster whose image is unknown
        # must stop the retention rule rather than lose its image.
        try:
            recorded = Inventory.read(inventory_file).extra_vars.get(HASH_VAR)
        except OSError as exc:
            raise StateError(
                f"cannot read {inventory_file} ({exc.strerror}): the baked image it uses is unknown",
                hint="fix its permissions, or take that cluster down, before pruning images",
            ) from None
        if recorded:
            found.add(str(recorded))
    return found


def to_prune(
    images: Iterable[CloudImage], *, referenced: set[str], keep: int = KEEP_NEWEST
) -> list[CloudImage]:
    """The retention rule: per base image, the ``keep`` newest stay; an older one goes only when no live
    instance runs from it and no cluster state on this machine records its hash."""
    by_base: dict[str, list[CloudImage]] = {}
    for image in images:
        by_base.setdefault(image.base, []).append(image)
    doomed = []
    for family in by_base.values():
        for image in sorted(family, key=lambda i: i.created, reverse=True)[keep:]:
            in_use = image.used_by or any(matches(image, digest) for digest in referenced)
            if not in_use:
                doomed.append(image)
    return doomed


_Image = TypeVar("_Image")


def the_one(
    found: list[_Image],
    known: list[_Image],
    name: str,
    label: Callable[[_Image], str],
    *,
    where: str,
    hint: str,
) -> _Image:
    """The one image of ``found`` that ``name`` matched among ``known``; a clear error for none or several."""
    if len(found) == 1:
        return found[0]
    if not found:
        names = ", ".join(label(image) for image in known) or "none"
        raise ProvisionError(f"no baked image named {name!r}", hint=f"baked images {where}: {names}")
    raise ProvisionError(
        f"{name!r} matches {len(found)} baked images: {', '.join(label(image) for image in found)}", hint=hint
    )
