"""Checks that hold for every provider: the instance types, the fabric, the validation plan."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

from gpufleet.catalog import Catalog
from gpufleet.catalog.cuda import cuda_too_old
from gpufleet.catalog.os_releases import OS_RELEASES
from gpufleet.catalog.slurm import SLURM_RELEASES
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import ClusterSpec, FabricKind, Role
from gpufleet.validate.bound import derived_expectation

_CLOUDS = ("aws", "gcp", "azure")
# Checks of the catalog's facts hold on a Kubernetes cluster handed over too (its nodes are catalog types).
_EVERY = ("local", "aws", "gcp", "azure", "baremetal", "kubernetes")
_GENERIC = "baremetal"  # a bare-metal machine with no catalog entry (preflight.baremetal.GENERIC_TYPE)


def _group_path(spec: ClusterSpec, name: str) -> str:
    index = next(i for i, g in enumerate(spec.node_groups) if g.name == name)
    return f"node_groups[{index}]"


@check("instance_type_known", providers=_EVERY)
def instance_type_known(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = spec.provider.kind
    for group in spec.node_groups:
        path = f"{_group_path(spec, group.name)}.instance_type"
        item = catalog.get(group.instance_type)
        if item is None:
            if provider in _CLOUDS and Role.COMPUTE in group.roles:
                known = ", ".join(sorted(i.name for i in catalog.for_provider(provider) if i.gpu))
                yield Finding(
                    Severity.ERROR,
                    "instance_type_known",
                    path,
                    f"'{group.instance_type}' is not in gpufleet's {provider} catalog, so its fabric and "
                    f"GPU layout are unknown; use one of: {known}",
                )
            elif provider in _CLOUDS:
                yield Finding(
                    Severity.WARNING,
                    "instance_type_known",
                    path,
                    f"'{group.instance_type}' is not in the catalog: no price or size check for this group",
                )
            elif (
                provider == "baremetal" and Role.COMPUTE in group.roles and group.instance_type != "baremetal"
            ):
                # A site may name its own machines, but a typo of a catalog type silently drops the
                # bandwidth gate (no catalog figure to gate on): say which known type is closest.
                named = sorted(i.name for i in catalog.for_provider("baremetal"))
                close = difflib.get_close_matches(group.instance_type, named, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                yield Finding(
                    Severity.WARNING,
                    "instance_type_known",
                    path,
                    f"'{group.instance_type}' is not in the catalog: {hint}Without a catalog entry there "
                    "is no fabric or bandwidth figure, so validation gates no bandwidth for this group; "
                    f"known bare-metal types: {', '.join(named)}",
                )
            elif provider == "kubernetes":
                # A handed-over cluster's nodes may be of any cloud's type: the closest of all GPU types.
                gpu_types = sorted(i.name for i in catalog.instance_types.values() if i.gpu)
                close = difflib.get_close_matches(group.instance_type, gpu_types, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                yield Finding(
                    Severity.WARNING,
                    "instance_type_known",
                    path,
                    f"'{group.instance_type}' is not in the catalog: {hint}the nodes' own GPU counts are "
                    "taken, and bandwidth is judged only against validation.min_busbw",
                )
            continue
        if item.provider != provider and provider != "kubernetes":  # a handed-over cluster of any cloud
            yield Finding(
                Severity.ERROR,
                "instance_type_provider",
                path,
                f"'{group.instance_type}' is a {item.provider} type, but the provider is {provider}",
            )


@check("instance_type_figures_known", providers=_EVERY)
def instance_type_figures_known(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """A type whose catalog entry marks a needed figure unknown (no public source settles it) is refused,
    not planned on a guess."""
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is None or not item.unknown:
            continue
        unknown = "; ".join(f"{figure}: {why}" for figure, why in item.unknown.items())
        yield Finding(
            Severity.ERROR,
            "instance_type_figures_known",
            f"{_group_path(spec, group.name)}.instance_type",
            f"gpufleet cannot plan {group.instance_type} yet, its catalog entry leaves open {unknown}. Pick "
            "another type, or settle each with its source in src/gpufleet/catalog/instances.yaml",
        )


@check("fabric_matches_type", providers=_EVERY)
def fabric_matches_type(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    wanted = spec.fabric.kind
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is None:
            continue
        path = f"{_group_path(spec, group.name)}.instance_type"
        has = item.fabric.kind
        if wanted is FabricKind.ETHERNET:
            if has is not FabricKind.ETHERNET:
                yield Finding(
                    Severity.WARNING,
                    "fabric_unused",
                    "fabric.kind",
                    f"{group.instance_type} has {has.value} ({item.fabric.bandwidth_gbps:g} Gbps) but the "
                    f"spec asks for plain ethernet; set fabric: {has.value} to use it",
                )
        elif wanted is not has:
            yield Finding(
                Severity.ERROR,
                "fabric_matches_type",
                path,
                f"fabric '{wanted.value}' is not available on {group.instance_type}, which has "
                f"'{has.value}'; set fabric: {has.value} or pick a type with {wanted.value}",
            )
        if spec.fabric.interfaces is not None and spec.fabric.interfaces > item.fabric.interfaces:
            yield Finding(
                Severity.ERROR,
                "fabric_interfaces",
                "fabric.interfaces",
                f"{group.instance_type} has {item.fabric.interfaces} fabric interfaces; "
                f"{spec.fabric.interfaces} asked. Drop fabric.interfaces to use the catalog's count",
            )


@check("cuda_targets_gpu", providers=("aws", "gcp", "azure", "baremetal"))
def cuda_targets_gpu(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """nccl-tests is built for the GPU's architecture: the spec's CUDA must be able to target it."""
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is None or item.gpu is None:
            continue
        too_old = cuda_too_old(item.gpu.arch, spec.software.cuda)
        if too_old is not None:
            first, source = too_old
            yield Finding(
                Severity.ERROR,
                "cuda_targets_gpu",
                "software.cuda",
                f"CUDA {spec.software.cuda} cannot compile for {item.gpu.arch} ({group.instance_type}'s "
                f"{item.gpu.model}); the first CUDA that does is {first} ({source}). Set software.cuda "
                f"to {first} or later",
            )


@check("compute_types_uniform", providers=_EVERY)
def compute_types_uniform(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    types = {g.instance_type for g in spec.compute_groups}
    if len(types) > 1:
        yield Finding(
            Severity.WARNING,
            "compute_types_uniform",
            "node_groups",
            f"compute groups mix instance types ({', '.join(sorted(types))}); a collective runs at the "
            "speed of the slowest node, and the gate uses the first group's baseline",
        )


@check("gpus_present", providers=("aws", "gcp", "azure", "baremetal", "kubernetes"))
def gpus_present(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    for group in spec.compute_groups:
        item = catalog.get(group.instance_type)
        if item is not None and item.gpu is None:
            yield Finding(
                Severity.WARNING,
                "gpus_present",
                f"{_group_path(spec, group.name)}.instance_type",
                f"{group.instance_type} has no GPU: nccl-tests cannot run on this group",
            )


@check("multi_node", providers=_EVERY)
def multi_node(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    if spec.compute_count < 2:
        yield Finding(
            Severity.WARNING,
            "multi_node",
            "node_groups",
            "only one compute node: the validation exercises NVLink inside the node, not the fabric; "
            "use count: 2 or more to test the network",
        )


@check("baseline_known", providers=_EVERY)
def baseline_known(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    groups = spec.compute_groups
    instance_type = groups[0].instance_type
    for collective in spec.validation.collectives:
        if collective in spec.validation.min_busbw:
            continue
        baseline = catalog.baseline(instance_type, spec.compute_count, collective.value)
        item = catalog.get(instance_type)
        derived = derived_expectation(catalog, item, collective.value, spec.compute_count) if item else None
        if baseline is None and derived is not None:
            yield Finding(
                Severity.INFO,
                "baseline_known",
                "validation.min_busbw",
                f"no published {collective.value} baseline for {instance_type}: the gate expects "
                f"{derived.expected:.4g} GB/s, {derived.fraction:.2f} x the fabric's physical bound (the "
                f"fraction {derived.reference}); set validation.min_busbw.{collective.value} (GB/s) or "
                "validation.baseline: ledger to gate on your own figure",
            )
        elif baseline is None:
            yield Finding(
                Severity.INFO,
                "baseline_known",
                "validation.min_busbw",
                f"no published {collective.value} baseline for {instance_type} and no GPU fabric to bound "
                f"it: the gate judges correctness only; set validation.min_busbw.{collective.value} (GB/s) "
                "to gate bandwidth",
            )
        elif baseline.message_bytes > spec.validation.max_bytes:
            yield Finding(
                Severity.WARNING,
                "baseline_size",
                "validation.max_bytes",
                f"the {collective.value} baseline for {instance_type} was measured at "
                f"{baseline.message_bytes} bytes, above max_bytes ({spec.validation.max_bytes}); the "
                "comparison uses smaller messages and will read low",
            )


def os_release_findings(
    name: str, spec: ClusterSpec, releases: dict[str, str], fix: str
) -> Iterator[Finding]:
    """The finding of each cloud's OS release check (``name``), from the OS release (catalog.os_releases
    key) each group boots. Every node runs the one Slurm the slurm role builds (software.slurm), built once
    per node userland: groups on two releases cost a second build, on the first node of each (minutes of
    its cores, the first time; the control host's cache keeps both). Information, not a fault."""
    if len(set(releases.values())) < 2:
        return
    booted = ", ".join(f"'{group}' boots {OS_RELEASES[key].name}" for group, key in releases.items())
    count = len(set(releases.values()))
    yield Finding(
        Severity.INFO,
        name,
        "node_groups",
        f"node groups boot different OS releases: {booted}. Every node runs Slurm {spec.software.slurm} "
        f"(software.slurm), which the slurm role builds once per OS release: {count} builds, each on the "
        "first node of its release the first time (minutes), then taken from the control host's cache "
        f"(docs/slurm.md). For one build: {fix}",
    )


# The first four bytes of every squashfs image: its superblock's magic, 0x73717368 little-endian ("hsqs" on
# disk; SQUASHFS_MAGIC in the kernel's include/uapi/linux/magic.h and squashfs-tools' squashfs_fs.h, read
# 2026-11-27).
SQUASHFS_MAGIC = b"hsqs"


@check("container_image_usable")
def container_image_usable(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """software.container_image before anything is made (it used to fail only in configure, after every node
    was made): a squashfs file must be one on this machine, which configure copies it from; a registry
    reference must read as enroot reads it ([REGISTRY#]IMAGE[:TAG|@DIGEST], enroot's doc/cmd/import.md)."""
    image = spec.software.container_image
    if image is None:
        return
    path = "software.container_image"
    if image.startswith("/"):
        problem = _squashfs_problem(Path(image))
        if problem:
            yield Finding(Severity.ERROR, "container_image_usable", path, problem)
        return
    first, _, rest = image.partition("/")
    if "#" not in image and rest and ("." in first or ":" in first or first == "localhost"):
        yield Finding(
            Severity.ERROR,
            "container_image_usable",
            path,
            f"'{image}' names the registry {first} with a '/', and enroot reads the part before '#' as the "
            f"registry: this would be the Docker Hub repository '{first}/{rest.split(':')[0]}'. Write it "
            f"{first}#{rest}",
        )
    elif ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        yield Finding(
            Severity.WARNING,
            "container_image_usable",
            path,
            f"'{image}' has no tag: enroot imports 'latest', which changes under you; pin a tag or a digest "
            "(e.g. nvcr.io#nvidia/pytorch:25.01-py3)",
        )


def _squashfs_problem(image: Path) -> str | None:
    made = "make it (docs/containers.md: podman export, then mksquashfs of squashfs-tools), or fix the path"
    magic = SQUASHFS_MAGIC.decode()
    if not image.exists():
        return f"{image} does not exist on this machine, from which configure copies it to the nodes: {made}"
    if not image.is_file():
        return f"{image} is not a file: {made}"
    try:
        with image.open("rb") as handle:
            head = handle.read(len(SQUASHFS_MAGIC))
    except OSError as exc:
        return f"{image} cannot be read here ({exc.strerror}): configure copies it from this machine"
    if head != SQUASHFS_MAGIC:
        return f"{image} is not a squashfs image (it starts with {head!r}, not squashfs's '{magic}'): {made}"
    return None


@check("slurm_release_pinned")
def slurm_release_pinned(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    """software.slurm names a release whose source checksum gpufleet pins (gpufleet.catalog.slurm): the slurm
    role builds only what it can check."""
    value = spec.software.slurm
    if value not in SLURM_RELEASES:
        known = ", ".join(sorted(SLURM_RELEASES))
        yield Finding(
            Severity.ERROR,
            "slurm_release_pinned",
            "software.slurm",
            f"gpufleet builds Slurm from a release whose source checksum it pins, and has none for "
            f"{value}: set software.slurm to one it knows ({known}), or leave it out for the default. A "
            "newer release is added to src/gpufleet/catalog/slurm.py and roles/slurm/vars/main.yml with "
            "the sha256 of SchedMD's tag archive (docs/slurm.md)",
        )
