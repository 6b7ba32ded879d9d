"""``gpufleet up / status / down`` for clouds: a cluster's Pulumi program driven by the Automation API.

``PulumiBackend`` is the cloud-blind driver; each cloud's backend (``gpufleet.infra.aws.backend``,
``gpufleet.infra.gcp.backend``) subclasses it with what only that cloud knows (its abstract methods): its
component (the program), its offline mocks, the provider's stack config, the credentials check, how SSH
reaches a node, the leftover and expiry finders, and its baked images (``images``, a ``BakeSource``).
The same program runs in ``stacks/`` under ``pulumi up`` in CI and under mocks for ``gpufleet plan``.

The stack is named after the cluster; its backend is ``$PULUMI_BACKEND_URL`` when set (an S3 bucket,
Pulumi Cloud, ...), else a local file backend in the cluster's state folder (``<state>/pulumi``). The
stack's config records the provider's settings and the cluster's creation time, so the expiry tag stays
put across runs. ``up`` returns the inventory built from the stack outputs; ``destroy`` destroys the stack
(lifecycle's teardown then asks ``leftovers``). Missing prerequisites fail early with
``EnvironmentProblem``: the Pulumi CLI (the Automation API runs it) and the cloud's credentials.
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.configure import relay
from gpufleet.errors import ProvisionError, StateError
from gpufleet.infra import outputs as stack_outputs
from gpufleet.infra.images import BakedRecord, BakeSource, CloudImage
from gpufleet.infra.leftovers import ExpiredCluster, Leftover, settle
from gpufleet.infra.pulumi_command import pulumi_cli
from gpufleet.infra.tags import PLAN_CLUSTER_ID
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.progress import Reporter
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from pulumi import automation as auto

    from gpufleet.infra.adopted import AdoptedStack
    from gpufleet.infra.plan import MockCloud

PROJECT = "gpufleet"
CLUSTER_ID_CONFIG = "gpufleet:clusterId"  # the cluster's id in the stack's config (gpufleet.state)


def backend_url(state: ClusterState) -> str:
    configured = os.environ.get("PULUMI_BACKEND_URL")
    if configured:
        return configured
    return state.backend_dir("pulumi").resolve().as_uri()


def cluster_key(state: ClusterState) -> str:
    """The cluster's own SSH public key (made once in the state folder): gpufleet configures with it.

    It is authorized on every node besides ``access.ssh_public_key``, which stays the user's own way in.
    """
    state.ensure_ssh_key()
    return state.public_key.read_text(encoding="utf-8").strip()


def known_hosts_args(state: ClusterState) -> str:
    return f"-o UserKnownHostsFile={state.known_hosts} -o StrictHostKeyChecking=accept-new"


def _created_at(state: ClusterState) -> datetime:
    return state.created_at if state.exists() else datetime.now(UTC).replace(microsecond=0)


def _cluster_id(state: ClusterState) -> str:
    """The cluster's id from its state (``ClusterState.begin`` made it at the first up)."""
    found = state.cluster_id
    if found is None:
        raise StateError(
            f"cluster '{state.name}' has no id in {state.state_file}",
            hint="run 'gpufleet up SPEC' (it records one); a state made by an older gpufleet gets one there",
        )
    return found


def _stack_name(spec: ClusterSpec, state: ClusterState) -> str:
    """The cluster's Pulumi stack: the project's own stack when adopted (``gpufleet adopt``; its name is the
    one ``pulumi`` and CI know, not the cluster's), else the inline stack named after the cluster."""
    from gpufleet.infra import adopted

    try:
        project_stack = adopted.adopted_of(state)
    except StateError:  # a damaged record: the inline stack's name, so down can still destroy it
        return spec.name
    return project_stack.stack if project_stack is not None else spec.name


def _tail(exc: BaseException, lines: int = 12) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip().splitlines()
    return "\n".join(text[-lines:])


def _plain(result_outputs: Mapping[str, auto.OutputValue]) -> dict[str, Any]:
    return {key: value.value for key, value in result_outputs.items()}


class PulumiBackend(abc.ABC):
    """A cloud's backend: the Automation API driver, with the cloud's hooks left to subclasses."""

    kind = ""
    # The spec fields whose change replaces a group's nodes rather than updating them (gpufleet plan).
    replacing_fields: tuple[str, ...] = ()
    # Whether the nodes ``up`` makes from a baked image get their facts to configure themselves at boot
    # (docs/boot-configure.md): set by ``up`` while the program runs; ``plan`` and stacks/ push.
    boot_configure = False

    # ---- what each cloud says -----------------------------------------------------------------------

    @abc.abstractmethod
    def program(
        self,
        spec: ClusterSpec,
        created_at: datetime,
        ssh_keys: Sequence[str],
        baked: CloudImage | None = None,
        cluster_id: str = PLAN_CLUSTER_ID,
    ) -> dict[str, Any]:
        """Register the cluster's component in the current Pulumi stack; return its outputs.

        ``baked``: the baked image of the spec's roles and pins, which every node boots; ``cluster_id``:
        the cluster's id (``gpufleet.state``), tagged on every resource (the plan's placeholder offline)."""

    @abc.abstractmethod
    def mock_cloud(self, spec: ClusterSpec) -> MockCloud:
        """The cloud's offline mocks (``gpufleet plan``)."""

    @abc.abstractmethod
    def provider_config(self, spec: ClusterSpec) -> dict[str, str]:
        """Stack config for the cloud's default provider (region, project, ...)."""

    @abc.abstractmethod
    def check_credentials(self, spec: ClusterSpec) -> None:
        """Raise ``EnvironmentProblem`` when the cloud's credentials are missing (calls nothing)."""

    kept_without_state = ""  # a cloud cluster is known by its state folder (and the stack it names)

    def found_without_state(self, spec: ClusterSpec) -> list[str]:
        return []

    def software_overrides(self, spec: ClusterSpec) -> dict[str, Any]:
        return {}

    @abc.abstractmethod
    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        """How Ansible reaches the nodes (user, key, SSH options, the cloud's tunnel)."""

    @abc.abstractmethod
    def find_leftovers(self, spec: ClusterSpec, cluster_id: str | None = None) -> list[Leftover]:
        """What the cloud still holds tagged (labelled) for the cluster; with ``cluster_id``, not what
        another cluster of the same name holds (``tags.same_cluster``)."""

    expiry_scope = ""  # what find_expired searches one of: "region" (AWS), "project" (GCP)

    def expiry_scope_of(self, spec: ClusterSpec) -> str:
        """The region (project, subscription) a spec's cluster lives in: where ``find_expired`` finds it."""
        return str(getattr(spec.provider, self.expiry_scope))

    @abc.abstractmethod
    def find_expired(self, scope: str) -> list[ExpiredCluster]:
        """Clusters past their expiry by the cloud's tags or labels, in one region or project."""

    @property
    @abc.abstractmethod
    def images(self) -> BakeSource:
        """What the cloud says about its baked images (``gpufleet.bake`` drives them)."""

    def host_address(self, host: dict[str, Any]) -> str:
        """Where Ansible connects to one host of the outputs (default: its private IP)."""
        return str(host["private_ip"])

    # ---- the stack ----------------------------------------------------------------------------------

    def stack_config(
        self, spec: ClusterSpec, created_at: datetime, cluster_id: str | None = None
    ) -> dict[str, str]:
        """The stack's config: where the default provider points, when the cluster was made, its id."""
        ids = {CLUSTER_ID_CONFIG: cluster_id} if cluster_id else {}
        return {
            "gpufleet:createdAt": created_at.astimezone(UTC).isoformat(),
            **ids,
            **self.provider_config(spec),
        }

    def select_stack(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        program: Callable[[datetime, tuple[str, ...]], None] | None = None,
        baked: CloudImage | None = None,
    ) -> auto.Stack:
        """Create or select the cluster's stack with its inline program, backend and config.

        ``program`` (called with the creation time and the keys to authorize) replaces the cluster's
        (the image builder's stack); ``baked`` is the image the cluster's nodes boot. A cluster adopted
        from a project's stack (``gpufleet adopt``) gets that stack, its config untouched."""
        from pulumi import automation as auto

        from gpufleet.infra import adopted

        project_stack = adopted.adopted_of(state) if program is None else None
        if project_stack is not None:
            return adopted.select(project_stack)
        cli = pulumi_cli()
        created_at = _created_at(state)
        url = backend_url(state)
        work_dir = state.backend_dir("pulumi")
        work_dir.mkdir(parents=True, exist_ok=True)
        # The engine serves a Python dynamic resource (the AWS fleet release) from a process of its own,
        # `python3 -m pulumi.dynamic` found on PATH when the project names no virtualenv (the
        # pulumi-resource-pulumi-python plugin): this interpreter's folder goes first, so it imports the
        # gpufleet that runs this inline program.
        env: dict[str, str] = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
        }
        if url.startswith("file:") and not os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
            # The stack holds no secret; the file backend still wants a passphrase for its secrets manager.
            env["PULUMI_CONFIG_PASSPHRASE"] = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
        keys = (cluster_key(state),)
        cluster_id = state.cluster_id if program is None else None

        def run() -> None:
            if program is not None:
                program(created_at, keys)
                return
            stack_outputs.export_outputs(self.program(spec, created_at, keys, baked, _cluster_id(state)))

        try:
            stack = auto.create_or_select_stack(
                stack_name=spec.name,
                project_name=PROJECT,
                program=run,
                opts=auto.LocalWorkspaceOptions(
                    work_dir=str(work_dir),
                    env_vars=env,
                    project_settings=auto.ProjectSettings(
                        name=PROJECT, runtime="python", backend=auto.ProjectBackend(url)
                    ),
                    pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent)),
                ),
            )
            stack.set_all_config(
                {
                    key: auto.ConfigValue(value)
                    for key, value in self.stack_config(spec, created_at, cluster_id).items()
                }
            )
        except auto.CommandError as exc:
            raise ProvisionError(f"cannot open Pulumi stack '{spec.name}' at {url}: {_tail(exc)}") from None
        return stack

    # ---- verbs --------------------------------------------------------------------------------------

    def deploy(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        program: Callable[[datetime, tuple[str, ...]], None] | None = None,
        baked: CloudImage | None = None,
    ) -> dict[str, Any]:
        """``pulumi up`` the cluster's stack (or ``program``'s); return its outputs.

        The cluster's nodes boot ``baked``, the image the pipeline chose (``Baker.newest``), or the base
        image when None; the builder's ``program`` boots its own."""
        from pulumi import automation as auto

        pulumi_cli()
        self.check_credentials(spec)
        if program is None:
            self.check_tools(spec)
        stack = self.select_stack(spec, state, program, None if program is not None else baked)
        replace: dict[str, str] = {}
        if program is None:
            try:
                replace = self.replace_before_up(stack.export_stack().deployment or {})
            except auto.CommandError:  # a stack without state has nothing to replace
                replace = {}
        for urn, why in replace.items():
            reporter.info(f"replacing {urn.rsplit('::', 1)[-1]}: {why}")
        with reporter.step(f"pulumi up: stack {spec.name}"):
            try:
                result = stack.up(
                    color="never",
                    on_output=lambda line: reporter.info(line.rstrip()),
                    replace=list(replace) or None,
                )
            except auto.CommandError as exc:
                raise ProvisionError(
                    f"pulumi up of cluster '{spec.name}' failed:\n{_tail(exc)}",
                    hint="fix the cause above and run 'gpufleet up' again (it picks up where it stopped), "
                    "or 'gpufleet down' to remove what was made",
                ) from None
        return _plain(result.outputs)

    def check_tools(self, spec: ClusterSpec) -> None:
        """Refuse an ``up`` whose nodes this machine could not reach afterwards (none here; AWS: the aws
        CLI and its Session Manager plugin)."""
        return

    def replace_before_up(self, deployment: Mapping[str, Any]) -> dict[str, str]:
        """URN -> why, for what in the stack's state the next ``pulumi up`` must replace, not keep (none
        here; AWS: an instant fleet whose launch came short or that lost a node)."""
        return {}

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: BakedRecord | None = None,
    ) -> Inventory:
        """``deploy``, then the inventory of the stack's outputs. ``baked``: the cloud image the pipeline
        chose (``CloudBaker.newest``), which the cluster's nodes boot."""
        assert baked is None or isinstance(baked, CloudImage), f"a cloud boots a cloud image, not {baked!r}"
        # A cluster made now from the baked image configures itself at boot (unless GPUFLEET_CONFIGURE_FROM
        # asks for a push: here or head), and one that did keeps doing so; nodes made before the bake keep
        # their user data (the kept-image rule) and are configured by push.
        before = Inventory.read(state.inventory_file) if state.inventory_file.exists() else None
        self.boot_configure = relay.chosen() == "auto" if before is None else before.boot_configure
        try:
            outputs = self.deploy(spec, state, reporter, baked=baked)
        finally:
            self.boot_configure = False
        return self.inventory_from_outputs(spec, state, outputs)

    def status(self, spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
        from pulumi import automation as auto

        if not state.exists():
            return {}
        stack = self.select_stack(spec, state)
        name = _stack_name(spec, state)
        try:
            outputs = _plain(stack.outputs())
            info = stack.info()
        except auto.CommandError as exc:
            raise ProvisionError(f"cannot read Pulumi stack '{name}': {_tail(exc)}") from None
        last = None
        if info is not None:
            last = {
                "kind": info.kind,
                "result": info.result,
                "ended": info.end_time,
                "changes": info.resource_changes,
            }
        hosts = outputs.get("hosts") or []
        return {
            "backend": backend_url(state),
            "stack": name,
            "last_update": last,
            "hosts": len(hosts),
            "outputs": outputs,
        }

    def destroy(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """``pulumi destroy`` the stack (its record stays until the leftover check finds nothing)."""
        return self.destroy_stack(spec, state, reporter)

    def destroy_stack(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        program: Callable[[datetime, tuple[str, ...]], None] | None = None,
    ) -> list[str]:
        """``destroy``, of the cluster's stack or of ``program``'s (the image builder's)."""
        pulumi_cli()
        self.check_credentials(spec)
        stack = self.select_stack(spec, state, program)
        name = _stack_name(spec, state) if program is None else spec.name
        hint = (
            "run 'gpufleet down' again; resources still tagged for the cluster are listed by the leftover "
            "check"
        )
        return self._destroy(stack, name, spec, reporter, hint)

    def destroy_project_stack(
        self, spec: ClusterSpec, project: AdoptedStack, reporter: Reporter
    ) -> list[str]:
        """``pulumi destroy`` of a project's stack that no state on this machine records (the reaper's
        ``--destroy-stacks``, ``gpufleet down --stack``): the project's own program, config and backend."""
        from gpufleet.infra import adopted

        pulumi_cli()
        self.check_credentials(spec)
        hint = f"run 'pulumi destroy --stack {project.stack}' in {project.project_dir} and read its error"
        return self._destroy(adopted.select(project), project.stack, spec, reporter, hint)

    @staticmethod
    def _destroy(stack: auto.Stack, name: str, spec: ClusterSpec, reporter: Reporter, hint: str) -> list[str]:
        from pulumi import automation as auto

        with reporter.step(f"pulumi destroy: stack {name}"):
            try:
                result = stack.destroy(color="never", on_output=lambda line: reporter.info(line.rstrip()))
            except auto.CommandError as exc:
                raise ProvisionError(
                    f"pulumi destroy of cluster '{spec.name}' (stack '{name}') failed:\n{_tail(exc)}",
                    hint=hint,
                ) from None
        deleted = (result.summary.resource_changes or {}).get(auto.OpType.DELETE, 0)
        return [f"Pulumi stack {name}: {deleted} resource(s) destroyed"]

    def leftovers(self, spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> list[str]:
        """What is still listed once two reads in a row agree (the listing APIs lag a destroy)."""
        return self.settled_leftovers(spec, state.cluster_id, reporter)

    def settled_leftovers(self, spec: ClusterSpec, cluster_id: str | None, reporter: Reporter) -> list[str]:
        """``leftovers`` of the cluster whose id is ``cluster_id`` (None: every cluster of the name)."""
        with reporter.step("looking for leftovers"):
            settled = settle(lambda: self.find_leftovers(spec, cluster_id), note=reporter.info)
            reporter.info(settled.summary())
            return [str(item) for item in settled.leftovers]

    def forget(self, spec: ClusterSpec, state: ClusterState) -> list[str]:
        """Remove the stack's record from its backend (once nothing of the cluster is left); an adopted
        cluster's stack stays, emptied, with its project (``gpufleet.infra.adopted``)."""
        from gpufleet.infra import adopted

        project_stack = adopted.adopted_of(state)
        if project_stack is not None:
            return [f"{project_stack} kept, empty: it belongs to its project ('pulumi stack rm' removes it)"]
        self.select_stack(spec, state).workspace.remove_stack(spec.name)
        return [f"Pulumi stack {spec.name} removed from {backend_url(state)}"]

    # ---- outputs -> inventory -----------------------------------------------------------------------

    def inventory_from_outputs(
        self, spec: ClusterSpec, state: ClusterState, outputs: dict[str, Any]
    ) -> Inventory:
        hosts = [{**host, "address": self.host_address(host)} for host in outputs["hosts"]]
        return from_stack_outputs({**outputs, "hosts": hosts}, connection=self.connection(spec, state))
