"""What keys a cloud's baked image and which image ``up`` boots: pure functions of the spec, the catalog and
the cloud's ``bake_host``/``bake_base`` (a leaf: it imports no backend, driver or bake procedure).

The local backend's pins are its own (``gpufleet.infra.local.bake.bake_pins``); both are hashed with the
role files by ``gpufleet.infra.images.content_hash``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from gpufleet.catalog import load_catalog
from gpufleet.infra.images import CONFIGURE_ONLY_SOFTWARE, CloudImage, content_hash
from gpufleet.spec.model import ClusterSpec, NodeGroup, Role

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


class BakeSource(Protocol):
    """What a cloud says about its images (``PulumiBackend``'s bake hooks)."""

    builder_cpu_type: str

    def bake_base(self, spec: ClusterSpec) -> str:
        """The image a bake starts from: the one the spec's GPU groups boot (a family or a pinned id)."""
        ...

    def bake_host(self, spec: ClusterSpec, group: NodeGroup) -> dict[str, Any]:
        """The builder as the roles see it: a host record (``outputs.host_record``) of ``group``'s type."""
        ...


@dataclass(frozen=True)
class BakeRequest:
    """What the builder stack is made of (``PulumiBackend.builder_program``)."""

    spec: ClusterSpec  # the builder's: the user's spec named bake-<hash>, with the builder's lifetime
    group: NodeGroup  # the node group whose image is baked (base image family, root volume size)
    instance_type: str
    digest: str
    base: str
    created_at: datetime
    host: dict[str, Any] = field(default_factory=dict)  # the builder as the roles see it (``bake_host``)
    ssh_keys: tuple[str, ...] = ()
    source: str | None = None  # set: the image step, from this (``PulumiBackend.image_source``)

    @property
    def name(self) -> str:
        return self.spec.name


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


def cloud_digest(cloud: BakeSource, spec: ClusterSpec) -> str:
    """The content hash of the roles and the cloud's pins now (``gpufleet.infra.images``)."""
    from gpufleet.configure.runner import project_root

    return content_hash(project_root(), bake_pins(cloud, spec))


def choose_baked(
    cloud: BakeSource,
    spec: ClusterSpec,
    newest: Callable[[str], CloudImage | None],
    say: Callable[[str], None],
) -> CloudImage | None:
    """The image a cluster's nodes boot: None for GPU groups of different install phases, else
    ``newest(hash of the roles and pins now)``; what was chosen is said either way."""
    if mixed_gpu_groups(cloud, spec):
        say("GPU groups of different install phases: no baked image, nodes install at configure")
        return None
    digest = cloud_digest(cloud, spec)
    found = newest(digest) if digest else None
    if found is None:
        say(
            f"no baked image for the current roles and pins ({(digest or '')[:12]}): nodes boot the base "
            "image and configure installs (gpufleet image build SPEC bakes one)"
        )
    else:
        say(
            f"node image {found.id}: baked {found.created} from the current roles and pins "
            f"({found.digest[:12]}); nodes made before it keep theirs"
        )
    return found
