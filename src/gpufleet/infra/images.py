"""Baked node images on every backend, as infra knows them (a leaf: it imports no backend, driver or bake
procedure): the content hash that keys them, what keys a cloud's image and what its builder stack is made
of, the record of an image, and the retention rule of cloud images.

A baked image holds every role's install phase (``playbooks/bake.yml --tags install``). It is keyed by a
content hash of what went into it: every file under ``roles/`` and ``playbooks/`` that Ansible reads (not
READMEs, not role tests) and the backend's pins (``bake_pins``: the spec's ``software`` block, the image it
starts from, what the builder node looks like to the roles). ``up`` finds an image by that hash alone;
``configure`` skips the install phase when the inventory's ``gpufleet_baked_image_hash`` is the hash of
the roles and pins now (``gpufleet.bake.baker.baked_and_current``). Each cloud says what it knows of its
images through one ``BakeSource`` (``gpufleet.infra.aws.images.AwsImages``, ``gcp.images.GcpImages``);
the bakers above infra (``gpufleet.bake``) drive them. The local backend keeps its images in podman
(``gpufleet.infra.local.bake``), the clouds as AMIs and GCP images with the record in their tags or labels
(``gpufleet.infra.tags``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gpufleet.catalog import load_catalog
from gpufleet.errors import ProvisionError, StateError
from gpufleet.spec.model import ClusterSpec, NodeGroup, Role

# Folders the playbooks read, relative to the project root. Within them, files Ansible never reads
# (documentation, role test scaffolding, caches, hidden files) do not change what is installed.
# src/gpufleet/node: a baked node carries its copy (roles/boot_configure's site) and configures itself from
# it at boot, so a change there must make a new image.
HASHED_FOLDERS = ("roles", "playbooks", "src/gpufleet/node")
_SKIPPED_PARTS = frozenset({"tests", "molecule", "__pycache__"})
_SKIPPED_SUFFIXES = (".md", ".pyc", "~")
# Spec software fields only the configure phase reads: they do not key a baked image. container_image is
# staged on the shared filesystem by roles/containers' configure tasks (docs/containers.md).
CONFIGURE_ONLY_SOFTWARE = frozenset({"container_image"})
# Cloud images kept per base image whatever else holds (the retention rule, docs/aws.md).
KEEP_NEWEST = 2
# The builder node of a bake is in every inventory group, so every role's install phase runs on it.
BUILDER_ROLES = [Role.CONTROLLER, Role.LOGIN, Role.COMPUTE]
# The host record fields that reach the install phase (the rest are per node: name, address, sizes). The
# per-component decision and paths come from the base image's manifest (catalog/images.yaml): a manifest
# that changes what is installed changes the bake's hash.
_INSTALL_FACTS = (
    "gpus",
    "gpu_model",
    "gpu_arch",
    "nvswitch",
    "gpu_stack",
    "gpu_components",
    "gpu_paths",
    "fabric_interfaces",
)


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


class BakedRecord(Protocol):
    """One baked image as a baker lists and chooses it (``CloudImage``, the local ``BakedImage``), and as a
    backend's ``up`` boots it."""

    @property
    def ref(self) -> str:
        """How ``up`` boots it and ``gpufleet image delete`` names it (an AMI id, a GCP image, a podman
        reference)."""
        ...

    @property
    def digest(self) -> str:
        """The content hash it was baked from."""
        ...

    @property
    def created(self) -> str:
        """When it was baked (ISO 8601)."""
        ...

    @property
    def used_by(self) -> tuple[str, ...]:
        """The clusters whose nodes run from it."""
        ...

    def to_json(self) -> dict[str, Any]: ...

    def said(self, verb: str) -> str:
        """One line for the user: the image, ``verb`` (baked, already baked, deleted) and its hash."""
        ...

    def row(self) -> dict[str, str]:
        """The image's columns in ``gpufleet image list``."""
        ...


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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "hash": self.digest,
            "base": self.base,
            "created": self.created,
            "snapshots": list(self.snapshots),
            "used_by": list(self.used_by),
        }


# ---- what keys a cloud's image, and what its builder is made of -------------------------------------


@dataclass(frozen=True)
class BakeRequest:
    """What the builder stack is made of (``BakeSource.builder_program``)."""

    spec: ClusterSpec  # the builder's: the user's spec named bake-<hash>, with the builder's lifetime
    group: NodeGroup  # the node group whose image is baked (base image family, root volume size)
    instance_type: str
    digest: str
    base: str
    created_at: datetime
    host: dict[str, Any] = field(default_factory=dict)  # the builder as the roles see it (``bake_host``)
    ssh_keys: tuple[str, ...] = ()
    source: str | None = None  # set: the image step, from this (``BakeSource.image_source``)

    @property
    def name(self) -> str:
        return self.spec.name


class BakeSource(Protocol):
    """What a cloud says about its baked images (``PulumiBackend.images``: ``AwsImages``, ``GcpImages``):
    what a bake starts from and makes, where the images live, and how they are found, listed and deleted."""

    @property
    def builder_cpu_type(self) -> str:
        """The builder's type when the install phase needs no GPU (docs/aws.md, docs/gcp.md)."""
        ...

    def bake_base(self, spec: ClusterSpec) -> str:
        """The image a bake starts from: the one the spec's GPU groups boot (a family or a pinned id)."""
        ...

    def bake_host(self, spec: ClusterSpec, group: NodeGroup) -> dict[str, Any]:
        """The builder as the roles see it: a host record (``outputs.host_record``) of ``group``'s type."""
        ...

    def builder_program(self, request: BakeRequest) -> dict[str, Any]:
        """Register the image builder's component (with ``request.source``: and its image)."""
        ...

    def image_source(self, outputs: dict[str, Any]) -> str:
        """What the image is made from, out of the builder stack's outputs (an instance id, a disk)."""
        ...

    def image_scope(self, spec: ClusterSpec) -> str:
        """Where the spec's baked images live: its region (AWS) or project (GCP), as ``expiry_scope``."""
        ...

    def baked_by_invoke(self, spec: ClusterSpec, digest: str) -> CloudImage | None:
        """Inside a Pulumi program: the newest image baked from ``digest`` in the spec's region or project,
        found with the provider's functions (an AMI's tags, an image's labels), or None."""
        ...

    def list_images(self, scope: str) -> list[CloudImage]:
        """The baked images in one region (AWS) or project (GCP), newest first, with their users."""
        ...

    def delete_image(self, scope: str, image: CloudImage) -> list[str]:
        """Delete one baked image (and, on AWS, its snapshots), refused while a node runs from it;
        return what was deleted."""
        ...


def bake_group(spec: ClusterSpec) -> NodeGroup:
    """The group whose image is baked: the first with GPUs (the catalog says), else the first compute one.
    Every node of the cluster boots the image, so it is made from the GPU groups' base image."""
    catalog = load_catalog()
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is not None and item.gpu is not None:
            return group
    return spec.compute_groups[0] if spec.compute_groups else spec.node_groups[0]


def mixed_gpu_groups(cloud: BakeSource, spec: ClusterSpec) -> list[str]:
    """The GPU groups whose install phase would differ from the baked group's (other GPU facts or GPU
    stack mode, say an NVSwitch type beside one without): one image cannot serve them all."""
    catalog = load_catalog()
    group = bake_group(spec)
    wanted = _install_facts(cloud.bake_host(spec, group))
    return [
        other.name
        for other in spec.node_groups
        if (item := catalog.get(other.instance_type)) is not None
        and item.gpu is not None
        and _install_facts(cloud.bake_host(spec, other)) != wanted
    ]


def cpu_architectures(spec: ClusterSpec) -> dict[str, list[str]]:
    """The node groups by their instance type's CPU architecture (the catalog's ``cpu_arch``)."""
    catalog = load_catalog()
    arches: dict[str, list[str]] = {}
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        arches.setdefault(item.cpu_arch if item is not None else "x86_64", []).append(group.name)
    return arches


def _install_facts(host: dict[str, Any]) -> dict[str, Any]:
    return {key: host[key] for key in _INSTALL_FACTS}


def builder_type(cloud: BakeSource, spec: ClusterSpec) -> str:
    """The GPU group's own type when the install phase installs the NVIDIA driver (its install steps load
    the module and start nvidia-persistenced, which need the device); else a CPU type (docs/aws.md)."""
    group = bake_group(spec)
    return (
        group.instance_type
        if cloud.bake_host(spec, group)["gpu_stack"] == "install"
        else cloud.builder_cpu_type
    )


def bake_pins(cloud: BakeSource, spec: ClusterSpec) -> dict[str, Any]:
    """Everything besides the role files that decides what the install phase puts on a cloud image."""
    host = cloud.bake_host(spec, bake_group(spec))
    return {
        "software": spec.software.model_dump(mode="json", exclude=set(CONFIGURE_ONLY_SOFTWARE)),
        "provider": spec.provider.kind,
        "base_image": cloud.bake_base(spec),
        "fabric": spec.fabric.kind.value,
        "builder": _install_facts(host),
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
            recorded = Inventory.read(inventory_file).baked_image_hash
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
