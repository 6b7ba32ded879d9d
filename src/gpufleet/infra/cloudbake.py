"""Bake an AWS AMI or a GCP image: one builder node, the roles' install phase over SSH, the image, no builder.

``bake(spec)`` is what ``gpufleet image build`` runs on a cloud spec. The content hash of the roles and
pins (``gpufleet.infra.images``) names the builder, ``bake-<hash>``, a short-lived Pulumi stack of its own
driven through the Automation API like a cluster's (``gpufleet.infra.automation``), kept in
``$GPUFLEET_STATE_DIR/.bake/<hash>`` so a bake that stopped half-way is picked up (or destroyed) by the
next one:

1. ``pulumi up`` of the builder (the cloud's ``builder_program``): one instance of ``builder_type`` from
   the base image of the spec's GPU groups, reachable by SSH from ``access.allowed_cidrs`` only;
2. ``playbooks/bake.yml --tags install`` over SSH on it, the builder in every inventory group (the same
   playbook and run as the local builder's: every role's install phase, then the seal play);
3. ``pulumi up`` again with the builder's id (AWS) or boot disk (GCP), recorded from step 1 as a plain
   string: the image
   (``aws.ec2.AmiFromInstance``, ``gcp.compute.Image`` of its boot disk), kept on delete;
4. ``pulumi destroy``: the builder and its network go, the image stays; then the stack is removed.

Whatever fails, the builder stack is destroyed before the error is raised; what could not be removed
is named after the error. Everything of the builder is tagged (labelled) as cluster ``bake-<hash>``
with a three-hour expiry, for the leftover check and ``gpufleet reap``; a bake stopped by a signal
leaves its builder up, and the next ``gpufleet image build`` picks the stack up where it was.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.catalog import load_catalog
from gpufleet.errors import GpufleetError, LeftoversError, ProvisionError, SpecError
from gpufleet.infra import images
from gpufleet.infra.automation import known_hosts_args
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, Lifetime, NodeGroup, Role
from gpufleet.state import ClusterState, state_root

if TYPE_CHECKING:
    from gpufleet.infra.automation import PulumiBackend
    from gpufleet.infra.plan import Plan

# A bake takes minutes to an hour; a builder left behind by a dead process expires after this.
BUILDER_TTL = timedelta(hours=3)
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


@dataclass(frozen=True)
class BakeRequest:
    """What the builder stack is made of (``PulumiBackend.builder_program``)."""

    spec: ClusterSpec  # the builder's: the user's spec named bake-<hash>, with the builder's lifetime
    group: NodeGroup  # the node group whose image is baked (base image family, root volume size)
    instance_type: str
    digest: str
    base: str
    created_at: datetime
    ssh_keys: tuple[str, ...] = ()
    source: str | None = None  # set: the image step, from this (``PulumiBackend.image_source``)

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class BakeResult:
    image: images.CloudImage
    built: bool  # False: an image with this hash was already there


def bake_group(spec: ClusterSpec) -> NodeGroup:
    """The group whose image is baked: the first with GPUs (the catalog says), else the first compute one.
    Every node of the cluster boots the image, so it is made from the GPU groups' base image."""
    catalog = load_catalog()
    for group in spec.node_groups:
        item = catalog.get(group.instance_type)
        if item is not None and item.gpu is not None:
            return group
    return spec.compute_groups[0] if spec.compute_groups else spec.node_groups[0]


def mixed_gpu_groups(cloud: PulumiBackend, spec: ClusterSpec) -> list[str]:
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


def builder_type(cloud: PulumiBackend, spec: ClusterSpec) -> str:
    """The GPU group's own type when the install phase installs the NVIDIA driver (its install steps load
    the module and start nvidia-persistenced, which need the device); else a CPU type (docs/aws.md)."""
    group = bake_group(spec)
    return (
        group.instance_type
        if cloud.bake_host(spec, group)["gpu_stack"] == "install"
        else cloud.builder_cpu_type
    )


def bake_pins(cloud: PulumiBackend, spec: ClusterSpec) -> dict[str, Any]:
    """Everything besides the role files that decides what the install phase puts on a cloud image."""
    host = cloud.bake_host(spec, bake_group(spec))
    return {
        "software": spec.software.model_dump(mode="json"),
        "provider": spec.provider.kind,
        "base_image": cloud.bake_base(spec),
        "fabric": spec.fabric.kind.value,
        "builder": _install_facts(host),
    }


def builder_spec(spec: ClusterSpec, digest: str) -> ClusterSpec:
    return spec.model_copy(
        update={"name": f"bake-{digest[:8]}", "lifetime": Lifetime(ttl=BUILDER_TTL, on_expiry="destroy")}
    )


def request_for(
    cloud: PulumiBackend, spec: ClusterSpec, *, created_at: datetime | None = None
) -> BakeRequest:
    if not spec.access.allowed_cidrs:
        raise SpecError(
            "the image builder is reached over SSH from access.allowed_cidrs, and the spec lists none",
            hint="add your address to access.allowed_cidrs (e.g. 203.0.113.7/32); nothing else may reach it",
        )
    arches = cpu_architectures(spec)
    if len(arches) > 1:
        raise SpecError(
            "node groups run on "
            + " and ".join(f"{arch} ({', '.join(names)})" for arch, names in sorted(arches.items()))
            + ": one baked image boots on one CPU architecture",
            hint="leave this cluster unbaked (its nodes install at configure), or use one CPU architecture",
        )
    mixed = mixed_gpu_groups(cloud, spec)
    if mixed:
        raise SpecError(
            f"node groups {', '.join(mixed)} install other GPU software than {bake_group(spec).name}: "
            "one baked image cannot serve them all",
            hint="leave this cluster unbaked (its nodes install at configure), or use one GPU type",
        )
    digest = images.spec_hash(spec) or ""
    return BakeRequest(
        spec=builder_spec(spec, digest),
        group=bake_group(spec),
        instance_type=builder_type(cloud, spec),
        digest=digest,
        base=cloud.bake_base(spec),
        created_at=(created_at or datetime.now(UTC)).replace(second=0, microsecond=0),
    )


def preview(spec: ClusterSpec, *, created_at: datetime | None = None) -> Plan:
    """The builder stack with its image step, offline under the cloud's mocks (``image build --plan``):
    the first step's mocked outputs give the image step its source, as the real first update does."""
    from gpufleet.infra.plan import run_offline
    from gpufleet.infra.program import pulumi_backend

    cloud = pulumi_backend(spec)
    request = request_for(cloud, spec, created_at=created_at)

    def run(step: BakeRequest) -> Plan:
        return run_offline(lambda: cloud.builder_program(step), cloud.mock_cloud(step.spec), stack=step.name)

    first = run(request)
    return run(replace(request, source=cloud.image_source(first.outputs)))


def bake(spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> BakeResult:
    """The baked image of ``spec``'s roles and pins, built when the cloud has none (or ``rebuild``)."""
    from gpufleet.infra.automation import pulumi_cli
    from gpufleet.infra.program import pulumi_backend

    cloud = pulumi_backend(spec)
    request = request_for(cloud, spec)
    pulumi_cli()
    cloud.check_credentials(spec)
    existing = _find(cloud, spec, request.digest)
    if existing is not None and not rebuild:
        return BakeResult(existing, built=False)
    state = ClusterState(name=request.name, root=state_root() / ".bake" / request.digest[:12])
    keys = (_cluster_key(state),)
    request = replace(request, ssh_keys=keys)

    def program_of(step: BakeRequest) -> Any:
        def run(_created_at: datetime, _keys: tuple[str, ...]) -> None:
            import pulumi

            for key, value in cloud.builder_program(step).items():
                pulumi.export(key, value)

        return run

    try:
        made = cloud.deploy(request.spec, state, reporter, program=program_of(request))
        _install_phase(request, state, made, reporter)
        step = replace(request, source=cloud.image_source(made))
        with reporter.step(f"image of {request.name}-builder (stops it, snapshots its disk)"):
            cloud.deploy(request.spec, state, reporter, program=program_of(step))
    except GpufleetError as failure:
        try:
            _remove_builder(cloud, request, state, reporter, program_of(request))
        except GpufleetError as cleanup:
            # The bake's own error comes first; what is left of the builder is named after it.
            raise type(failure)(
                f"{failure.message}\nand removing the builder failed too: {cleanup.message}",
                hint=cleanup.hint or failure.hint,
            ) from None
        raise
    _remove_builder(cloud, request, state, reporter, program_of(request))
    found = _find(cloud, spec, request.digest)
    if found is None:
        raise ProvisionError(
            f"the image step of {request.name} succeeded but no image is tagged {request.digest[:12]}"
        )
    return BakeResult(found, built=True)


def _find(cloud: PulumiBackend, spec: ClusterSpec, digest: str) -> images.CloudImage | None:
    found = cloud.list_images(cloud.image_scope(spec))
    return next((image for image in found if images.matches(image, digest)), None)


def _cluster_key(state: ClusterState) -> str:
    from gpufleet.infra.automation import cluster_key

    return cluster_key(state)


def _install_phase(
    request: BakeRequest, state: ClusterState, made: dict[str, Any], reporter: Reporter
) -> None:
    """``playbooks/bake.yml --tags install`` on the builder, over SSH to its public address."""
    from gpufleet.configure.runner import run_playbook
    from gpufleet.infra.program import pulumi_backend
    from gpufleet.inventory.model import with_software

    cloud = pulumi_backend(request.spec)
    host = {
        **cloud.bake_host(request.spec, request.group),
        "name": f"{request.name}-builder",
        "roles": [role.value for role in BUILDER_ROLES],
        "private_ip": str(made["private_ip"]),
        "address": str(made["public_ip"]),
    }
    outputs = {
        "cluster": request.name,
        "provider": request.spec.provider.kind,
        "fabric": request.spec.fabric.kind,
    }
    connection = Connection(
        user=IMAGE_USER,
        become=True,
        private_key_file=str(state.private_key),
        ssh_common_args=known_hosts_args(state),
    )
    inventory = Inventory.from_stack_outputs({**outputs, "hosts": [host]}, connection=connection)
    inventory = with_software(inventory, request.spec)
    # The builder runs nothing else: it may reboot to load a new NVIDIA kernel module (nvidia_driver).
    inventory = inventory.model_copy(
        update={
            "extra_vars": {
                **inventory.extra_vars,
                "nvidia_driver_reboot_allowed": True,
            }
        }
    )
    inventory.write(state.inventory_file)
    logs = Path(state.logs_dir) / "ansible"
    with reporter.step(f"bake: install phase of every role on {request.name}-builder"):
        run_playbook("bake.yml", state.inventory_file, logs, reporter, tags="install")


def _remove_builder(
    cloud: PulumiBackend, request: BakeRequest, state: ClusterState, reporter: Reporter, program: Any
) -> None:
    """Destroy the builder stack (the image is kept on delete), check that nothing of it is left, and
    remove the stack's record and the builder's folder."""
    cloud.destroy_stack(request.spec, state, reporter, program=program)
    left = cloud.leftovers(request.spec, state, reporter)
    if left:
        raise LeftoversError(
            f"the image builder {request.name}'s " + ", ".join(left) + " could not be removed",
            hint=f"run 'gpufleet image build' again, or remove what carries gpufleet:cluster={request.name}",
        )
    cloud.select_stack(request.spec, state, program).workspace.remove_stack(request.name)
    state.remove()
