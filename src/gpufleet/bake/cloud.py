"""Bake an AWS AMI or a GCP image: one builder node, the roles' install phase over SSH, the image, no builder.

``CloudBaker(cloud).build(spec)`` is what ``gpufleet image build`` runs on a cloud spec (``cloud``: the
spec's ``PulumiBackend``, passed in by ``gpufleet.bake.baker``; what it says about images is its
``images``, a ``BakeSource``). The content hash of the roles and pins (``gpufleet.infra.images``) names the
builder, ``bake-<hash>``, a short-lived Pulumi stack of its own driven through the Automation API like a
cluster's (``gpufleet.infra.pulumi_stack``), kept in
``$GPUFLEET_STATE_DIR/.bake/<hash>`` so a bake that stopped half-way is picked up (or destroyed) by the
next one:

1. ``pulumi up`` of the builder (the cloud's ``images.builder_program``): one instance of
   ``builder_type`` from the base image of the spec's GPU groups, reachable by SSH from
   ``access.allowed_cidrs`` only;
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

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpufleet.bake.result import BakeResult, choose_newest
from gpufleet.errors import GpufleetError, LeftoversError, ProvisionError, SpecError
from gpufleet.infra import images
from gpufleet.infra.images import (
    BUILDER_ROLES,
    BakeRequest,
    BakeSource,
    CloudImage,
    bake_group,
    bake_pins,
    builder_type,
    content_hash,
    cpu_architectures,
    mixed_gpu_groups,
)
from gpufleet.infra.pulumi_stack import known_hosts_args
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.paths import project_root
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec, Lifetime
from gpufleet.state import ClusterState, state_root

if TYPE_CHECKING:
    from pulumi import automation as auto

    from gpufleet.infra.plan import MockCloud, Plan

# A bake takes minutes to an hour; a builder left behind by a dead process expires after this.
BUILDER_TTL = timedelta(hours=3)
# What the builder stack's driver runs as its program (called with the creation time and the keys).
Program = Callable[[datetime, tuple[str, ...]], None]


class StackDriver(Protocol):
    """What a bake needs of a cloud's stack driver (``gpufleet.infra.pulumi_stack.PulumiBackend``)."""

    @property
    def images(self) -> BakeSource: ...

    def check_credentials(self, spec: ClusterSpec) -> None: ...

    def mock_cloud(self, spec: ClusterSpec) -> MockCloud: ...

    def deploy(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        program: Program | None = None,
        baked: CloudImage | None = None,
    ) -> dict[str, Any]: ...

    def destroy_stack(
        self, spec: ClusterSpec, state: ClusterState, reporter: Reporter, program: Program | None = None
    ) -> list[str]: ...

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]: ...

    def select_stack(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        program: Program | None = None,
        baked: CloudImage | None = None,
    ) -> auto.Stack: ...


def digest_of(source: BakeSource, spec: ClusterSpec) -> str:
    """The content hash of the roles and the cloud's pins now (``gpufleet.infra.images``)."""
    return content_hash(project_root(), bake_pins(source, spec))


def choose_baked(
    source: BakeSource,
    spec: ClusterSpec,
    newest: Callable[[str], CloudImage | None],
    say: Callable[[str], None],
) -> CloudImage | None:
    """The image a cloud cluster's nodes boot: None for GPU groups of different install phases, else
    ``newest(hash of the roles and pins now)``; what was chosen is said either way."""
    if mixed_gpu_groups(source, spec):
        say("GPU groups of different install phases: no baked image, nodes install at configure")
        return None
    return choose_newest(
        digest_of(source, spec),
        newest,
        say,
        unbaked="nodes boot the base image and configure installs",
        baked="nodes made before it keep theirs",
    )


def find_baked_in_program(spec: ClusterSpec) -> CloudImage | None:
    """``CloudBaker.newest`` from inside a Pulumi program that the pulumi CLI runs (``stacks/``, CI): the
    same choice, read with the provider's own functions, and said in the engine's log."""
    import pulumi

    from gpufleet.infra.program import pulumi_backend
    from gpufleet.providers import BACKENDS

    if not BACKENDS[spec.provider.kind].bakes_in_cloud:  # Azure: no builder yet, nothing to look up
        pulumi.log.info(f"{spec.provider.kind} bakes no images in gpufleet: nodes boot the spec's image")
        return None
    source = pulumi_backend(spec).images
    return choose_baked(source, spec, lambda digest: source.baked_by_invoke(spec, digest), pulumi.log.info)


def builder_spec(spec: ClusterSpec, digest: str) -> ClusterSpec:
    return spec.model_copy(
        update={"name": f"bake-{digest[:8]}", "lifetime": Lifetime(ttl=BUILDER_TTL, on_expiry="destroy")}
    )


def request_for(source: BakeSource, spec: ClusterSpec, *, created_at: datetime | None = None) -> BakeRequest:
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
    mixed = mixed_gpu_groups(source, spec)
    if mixed:
        raise SpecError(
            f"node groups {', '.join(mixed)} install other GPU software than {bake_group(spec).name}: "
            "one baked image cannot serve them all",
            hint="leave this cluster unbaked (its nodes install at configure), or use one GPU type",
        )
    digest = digest_of(source, spec)
    return BakeRequest(
        spec=builder_spec(spec, digest),
        group=bake_group(spec),
        instance_type=builder_type(source, spec),
        digest=digest,
        base=source.bake_base(spec),
        host=source.bake_host(spec, bake_group(spec)),
        created_at=(created_at or datetime.now(UTC)).replace(second=0, microsecond=0),
    )


class CloudBaker:
    """The baker of a cloud with a Pulumi program (AWS, GCP): AMIs or GCP images in the spec's region or
    project, made by the cloud's builder program (``cloud.images``) through its stack driver (``cloud``)."""

    in_run = False  # a builder instance bills by the hour: 'gpufleet image build' bakes, on purpose

    def __init__(self, cloud: StackDriver) -> None:
        self.cloud = cloud

    def digest(self, spec: ClusterSpec) -> str:
        return digest_of(self.cloud.images, spec)

    def newest(self, spec: ClusterSpec, reporter: Reporter) -> CloudImage | None:
        """The newest image baked from the roles and pins now in the spec's region or project (none for GPU
        groups of different install phases), said either way."""
        source = self.cloud.images

        def newest(digest: str) -> CloudImage | None:
            return images.newest_of(source.list_images(source.image_scope(spec)), digest)

        return choose_baked(source, spec, newest, reporter.info)

    def build(self, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool = False) -> BakeResult:
        return _bake(self.cloud, spec, reporter, rebuild=rebuild)

    def preview(self, spec: ClusterSpec, created_at: datetime) -> Plan:
        """The builder stack with its image step, offline under the cloud's mocks: the first step's mocked
        outputs give the image step its source, as the real first update does."""
        from gpufleet.infra.plan import run_offline

        cloud, source = self.cloud, self.cloud.images
        request = request_for(source, spec, created_at=created_at)

        def run(step: BakeRequest) -> Plan:
            return run_offline(
                lambda: source.builder_program(step), cloud.mock_cloud(step.spec), stack=step.name
            )

        first = run(request)
        return run(replace(request, source=source.image_source(first.outputs)))

    def images(self, spec: ClusterSpec | None) -> list[CloudImage]:
        """The baked images in the spec's region (AWS) or project (GCP), newest first, with their users."""
        assert spec is not None, "a cloud's images are listed for a spec"
        self.cloud.check_credentials(spec)
        source = self.cloud.images
        return source.list_images(source.image_scope(spec))

    def delete(self, spec: ClusterSpec | None, name: str) -> tuple[CloudImage, list[str]]:
        """Delete the one image ``name`` means (on AWS with its snapshots), refused while a node runs from
        it."""
        assert spec is not None, "a cloud's images are deleted for a spec"
        image = resolve(self.images(spec), name)
        source = self.cloud.images
        return image, source.delete_image(source.image_scope(spec), image)


def resolve(found: list[CloudImage], name: str) -> CloudImage:
    """The one image ``name`` means: its id, its name, or a prefix (6+ characters) of its hash."""
    wanted = name.strip()
    matched = [
        image
        for image in found
        if wanted in (image.id, image.name) or (len(wanted) >= 6 and image.digest.startswith(wanted))
    ]
    return images.the_one(
        matched,
        found,
        name,
        lambda image: image.id,
        where="there",
        hint="give the image's id (gpufleet image list --spec SPEC)",
    )


def _bake(cloud: StackDriver, spec: ClusterSpec, reporter: Reporter, *, rebuild: bool) -> BakeResult:
    from gpufleet.infra.pulumi_stack import pulumi_cli

    source = cloud.images
    request = request_for(source, spec)
    pulumi_cli()
    cloud.check_credentials(spec)
    existing = _find(source, spec, request.digest)
    if existing is not None and not rebuild:
        return BakeResult(existing, built=False)
    state = ClusterState(name=request.name, root=state_root() / ".bake" / request.digest[:12])
    keys = (_cluster_key(state),)
    request = replace(request, ssh_keys=keys)

    def program_of(step: BakeRequest) -> Program:
        def run(_created_at: datetime, _keys: tuple[str, ...]) -> None:
            import pulumi

            for key, value in source.builder_program(step).items():
                pulumi.export(key, value)

        return run

    try:
        made = cloud.deploy(request.spec, state, reporter, program=program_of(request))
        _install_phase(request, state, made, reporter)
        step = replace(request, source=source.image_source(made))
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
    found = _find(source, spec, request.digest)
    if found is None:
        raise ProvisionError(
            f"the image step of {request.name} succeeded but no image is tagged {request.digest[:12]}"
        )
    return BakeResult(found, built=True)


def _find(source: BakeSource, spec: ClusterSpec, digest: str) -> CloudImage | None:
    return images.newest_of(source.list_images(source.image_scope(spec)), digest)


def _cluster_key(state: ClusterState) -> str:
    from gpufleet.infra.pulumi_stack import cluster_key

    return cluster_key(state)


def _install_phase(
    request: BakeRequest, state: ClusterState, made: dict[str, Any], reporter: Reporter
) -> None:
    """``playbooks/bake.yml --tags install`` on the builder, over SSH to its public address."""
    from gpufleet.configure.runner import run_playbook
    from gpufleet.infra.software import with_software

    host = {
        **request.host,
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
    inventory = from_stack_outputs({**outputs, "hosts": [host]}, connection=connection)
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
    from gpufleet.configure.node_site import bake_vars

    with reporter.step(f"bake: install phase of every role on {request.name}-builder"):
        # The site the nodes configure themselves from at boot, for the builder's python3
        # (roles/boot_configure).
        extravars = bake_vars(inventory, request.digest, reporter, wait_s=900)
        run_playbook("bake.yml", state.inventory_file, logs, reporter, tags="install", extravars=extravars)


def _remove_builder(
    cloud: StackDriver, request: BakeRequest, state: ClusterState, reporter: Reporter, program: Program
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
