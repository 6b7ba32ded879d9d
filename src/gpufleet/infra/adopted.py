"""A cluster's Pulumi stack when a project made it (``pulumi up`` in ``stacks/``, CI), not ``gpufleet up``.

``gpufleet adopt`` records the stack in the cluster's state (``state.json``: ``"adopted": {"stack",
"project_dir"}``). From then on the cloud-blind driver (``gpufleet.infra.pulumi_stack``) selects that stack
in that project folder through the Automation API's local-program workspace (``pulumi.automation.
select_stack(stack_name, work_dir=...)``: the project's own ``Pulumi.yaml``, its program and its backend,
from the environment or ``pulumi login``) instead of the inline stack named after the cluster:
``status`` reads its outputs, ``down`` runs ``pulumi destroy`` of it, and ``up`` runs its program. The
project's stack config is never written (it is the project's file), and teardown keeps the emptied stack:
``pulumi stack rm`` would also delete the project's ``Pulumi.<stack>.yaml``, and the project's next
``pulumi up`` uses the stack again.

``pin_created_at`` is what ``gpufleet stack-pin`` runs before a project's ``pulumi up``: it writes
``gpufleet:createdAt`` into the stack's config, from the config when the user pinned it, else from the
stack's ``created_at`` output (a later up), else now (the first up); and ``gpufleet:clusterId`` the same
way (config, else the ``cluster_id`` output, else a new id: ``gpufleet.state.new_cluster_id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import ProvisionError, StateError
from gpufleet.infra import stack_access
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from pulumi import automation as auto

RECORD_KEY = "adopted"
CREATED_KEY = f"gpufleet:{stack_access.CREATED_CONFIG}"
CLUSTER_ID_KEY = f"gpufleet:{stack_access.CLUSTER_ID_CONFIG}"


@dataclass(frozen=True)
class AdoptedStack:
    stack: str
    project_dir: Path

    def to_record(self) -> dict[str, str]:
        return {"stack": self.stack, "project_dir": str(self.project_dir)}

    def __str__(self) -> str:
        return f"Pulumi stack '{self.stack}' of the project in {self.project_dir}"


def adopted_of(state: ClusterState) -> AdoptedStack | None:
    """The stack a cluster was adopted from, or None (``gpufleet up`` made it, or there is no state)."""
    if not state.exists():
        return None
    record = state.load().get(RECORD_KEY)
    if not isinstance(record, dict):
        return None
    return AdoptedStack(stack=str(record["stack"]), project_dir=Path(str(record["project_dir"])))


def _tail(exc: BaseException, lines: int = 12) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip().splitlines()
    return "\n".join(text[-lines:])


def _workspace(project_dir: Path) -> auto.LocalWorkspaceOptions:
    from pulumi import automation as auto

    from gpufleet.infra.pulumi_command import pulumi_cli

    if not (project_dir / "Pulumi.yaml").is_file():
        raise StateError(
            f"{project_dir} holds no Pulumi project (no Pulumi.yaml)",
            hint="run gpufleet from the checkout that holds the project, or pass its folder (--project-dir)",
        )
    cli = pulumi_cli()
    return auto.LocalWorkspaceOptions(
        work_dir=str(project_dir), pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent))
    )


def select(adopted: AdoptedStack) -> auto.Stack:
    """The adopted stack, selected in its project (it must exist)."""
    from pulumi import automation as auto

    opts = _workspace(adopted.project_dir)
    try:
        return auto.select_stack(stack_name=adopted.stack, work_dir=str(adopted.project_dir), opts=opts)
    except auto.CommandError as exc:
        raise ProvisionError(
            f"cannot select {adopted}: {_tail(exc)}",
            hint="log in to the backend that holds the stack ('pulumi login', PULUMI_BACKEND_URL) and check "
            "its name with 'pulumi stack ls' in that folder",
        ) from None


def read_outputs(adopted: AdoptedStack) -> dict[str, Any]:
    """All the stack's outputs, secrets in plain text (the Automation API reads them with
    ``pulumi stack output --json --show-secrets``)."""
    from pulumi import automation as auto

    stack = select(adopted)
    try:
        return {key: value.value for key, value in stack.outputs().items()}
    except auto.CommandError as exc:
        raise ProvisionError(f"cannot read the outputs of {adopted}: {_tail(exc)}") from None


def _cluster_id(stack: auto.Stack, config: Mapping[str, auto.ConfigValue]) -> str:
    """The stack's cluster id: its config's, else its ``cluster_id`` output (a later up), else a new one
    (the first up, or the first after a destroy: a cluster made again is another cluster)."""
    from gpufleet.state import new_cluster_id

    if CLUSTER_ID_KEY in config and config[CLUSTER_ID_KEY].value:
        return str(config[CLUSTER_ID_KEY].value)
    output = stack.outputs().get(stack_access.CLUSTER_ID_OUTPUT)
    if output is not None and output.value:
        return str(output.value)
    return new_cluster_id()


@dataclass(frozen=True)
class StackRecord:
    """What a project's stack says of the cluster it holds (its outputs): the authority on when that
    cluster expires and which cluster it is, whatever tags older resources still carry."""

    cluster: str
    cluster_id: str | None  # None: a stack brought up before ids
    expires_at: datetime | None


def stack_record(adopted: AdoptedStack) -> StackRecord | None:
    """The cluster the stack holds now, from its outputs (rewritten by every ``pulumi up``); None when it
    holds none (never brought up, or destroyed)."""
    outputs = read_outputs(adopted)
    if not outputs.get("hosts") or not outputs.get("cluster"):
        return None
    expires = outputs.get("expires_at")
    held = outputs.get(stack_access.CLUSTER_ID_OUTPUT)
    return StackRecord(
        cluster=str(outputs["cluster"]),
        cluster_id=str(held) if held else None,
        expires_at=stack_access.created_at(str(expires)) if expires else None,
    )


def pin_created_at(stack_name: str, project_dir: Path, now: datetime) -> tuple[str, str]:
    """Write ``gpufleet:createdAt`` into the stack's config (the stack is made when new); return the value
    and where it came from: "config", "stack output" or "first up"."""
    from pulumi import automation as auto

    opts = _workspace(project_dir)
    try:
        stack = auto.create_or_select_stack(stack_name=stack_name, work_dir=str(project_dir), opts=opts)
        config = stack.get_all_config()
        if CREATED_KEY in config:
            value, source = stack_access.iso(stack_access.created_at(config[CREATED_KEY].value)), "config"
        else:
            output = stack.outputs().get(stack_access.CREATED_OUTPUT)
            if output is not None and output.value:
                value = stack_access.iso(stack_access.created_at(str(output.value)))
                source = "stack output"
            else:
                value, source = stack_access.iso(stack_access.created_at(None, now)), "first up"
        stack.set_config(CREATED_KEY, auto.ConfigValue(value))
        stack.set_config(CLUSTER_ID_KEY, auto.ConfigValue(_cluster_id(stack, config)))
    except auto.CommandError as exc:
        raise ProvisionError(
            f"cannot pin gpufleet:createdAt of Pulumi stack '{stack_name}' in {project_dir}: {_tail(exc)}",
            hint="log in to the stack's backend ('pulumi login', PULUMI_BACKEND_URL) and run again",
        ) from None
    return value, source
