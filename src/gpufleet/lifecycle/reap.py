"""Expire clusters: find the ones past their lifetime and tear them down.

Two sources: the state folders on this machine (every cluster ``gpufleet up`` made here, with the spec it
was made from), and the clouds' expiry tags and labels (``gpufleet:expires-at``, ``gpufleet-expires-at``):
clusters made from CI with ``pulumi up`` have no state folder here. Those are destroyed through the stack
that made them when a Pulumi project folder (``stacks/``) is given: ``reap_stacks`` finds the one stack
whose spec names the expired cluster (``gpufleet.infra.stack_configs.project_stacks``) and destroys it;
without one they are listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError, LeftoversError, ProvisionError
from gpufleet.infra.stack_configs import Stack
from gpufleet.progress import Reporter
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState, state_root


@dataclass
class ReapItem:
    cluster: str
    provider: str
    expires_at: str
    action: str  # "destroyed", "would destroy", "kept (on_expiry: warn)", "failed: ...", "skipped: ..."
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "provider": self.provider,
            "expires_at": self.expires_at,
            "action": self.action,
            "removed": self.removed,
        }


Teardown = Callable[[ClusterSpec, ClusterState], list[str]]


def expired_states(
    now: datetime | None = None, root: Path | None = None, broken: list[ReapItem] | None = None
) -> list[tuple[ClusterState, dict]]:
    """States past their expiry. A state file that cannot be read is not expired: it goes to ``broken``
    (when given) with the reason, so one damaged folder never stops the sweep."""
    now = now or datetime.now(UTC)
    root = root or state_root()
    found = []
    for path in sorted(root.glob("*/state.json")) if root.exists() else []:
        state = ClusterState(name=path.parent.name, root=path.parent)
        try:
            record = state.load()
            expires = datetime.fromisoformat(record["expires_at"])
            expired = expires <= now
        except GpufleetError as exc:
            reason = exc.message
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
            reason = f"{path} has no valid expires_at ({type(exc).__name__}: {exc})"
        else:
            if expired:
                found.append((state, record))
            continue
        if broken is not None:
            broken.append(
                ReapItem(state.name, "?", "?", f"skipped: damaged state ({reason}); run 'gpufleet down SPEC'")
            )
    return found


def reap(teardown: Teardown, *, dry_run: bool = False, now: datetime | None = None) -> list[ReapItem]:
    """Tear down every local-state cluster whose lifetime has passed (``dry_run``: only say so)."""
    items: list[ReapItem] = []
    for state, record in expired_states(now, broken=items):
        item = ReapItem(state.name, record.get("provider", "?"), record["expires_at"], "")
        spec_path = record.get("spec_path")
        try:
            spec = load_spec(Path(spec_path)) if spec_path else None
        except GpufleetError as exc:
            spec = None
            item.action = f"skipped: its spec {spec_path} cannot be read ({exc.message.splitlines()[0]})"
        if spec is None:
            item.action = item.action or "skipped: no spec recorded; run 'gpufleet down SPEC' yourself"
        elif spec.name != state.name:
            item.action = f"skipped: {spec_path} now describes cluster '{spec.name}', not '{state.name}'"
        elif spec.lifetime.on_expiry == "warn":
            item.action = "kept (lifetime.on_expiry: warn)"
        elif dry_run:
            item.action = "would destroy"
        else:
            try:
                item.removed = teardown(spec, state)
                item.action = "destroyed"
            except GpufleetError as exc:
                item.action = f"failed: {exc.message.splitlines()[0]}"
        items.append(item)
    return items


# ---- clusters made by `pulumi up` in a Pulumi project folder (stacks/) ----------------------------------


@dataclass(frozen=True)
class CloudExpired:
    """A cluster past its expiry by a cloud's tags or labels (``find_expired``), as the reaper sees it."""

    cluster: str
    provider: str  # "aws", "gcp", "azure"
    scope: str  # the region (AWS), project (GCP) or subscription (Azure) it was found in
    expires_at: str


StackDestroy = Callable[[Stack], list[str]]  # destroys the stack, checks leftovers; raises GpufleetError


def reap_stacks(
    expired: list[CloudExpired],
    stacks: dict[str, list[Stack]],
    destroy: StackDestroy,
    *,
    dry_run: bool = False,
) -> list[ReapItem]:
    """Destroy, through its stack, every cluster the clouds' tags say is expired (``dry_run``: say so).

    A cluster is destroyed only when exactly one stack of the project makes it, on the same cloud, and its
    spec does not ask to be kept (``lifetime.on_expiry: warn``)."""
    items: list[ReapItem] = []
    seen: set[tuple[str, str]] = set()
    for entry in expired:
        if (entry.provider, entry.cluster) in seen:
            continue  # found in two regions or projects: one stack, one destroy
        seen.add((entry.provider, entry.cluster))
        item = ReapItem(entry.cluster, f"{entry.provider} {entry.scope}", entry.expires_at, "")
        makers = [
            stack for stack in stacks.get(entry.cluster, []) if stack.spec.provider.kind == entry.provider
        ]
        if not makers:
            item.action = (
                f"skipped: no stack in the project makes {entry.provider} cluster '{entry.cluster}'; "
                "destroy it from the stack that made it (pulumi destroy --stack NAME)"
            )
        elif len(makers) > 1:
            names = ", ".join(stack.name for stack in makers)
            item.action = f"skipped: stacks {names} all make cluster '{entry.cluster}'; destroy the right one"
        elif makers[0].spec.lifetime.on_expiry == "warn":
            item.action = f"kept (lifetime.on_expiry: warn; stack {makers[0].name})"
        elif dry_run:
            item.action = f"would destroy (stack {makers[0].name})"
        else:
            try:
                item.removed = destroy(makers[0])
                item.action = f"destroyed (stack {makers[0].name})"
            except GpufleetError as exc:
                item.action = f"failed: stack {makers[0].name}: {exc.message.splitlines()[0]}"
        items.append(item)
    return items


def project_stack_destroy(project: Path, reporter: Reporter) -> StackDestroy:
    """A ``StackDestroy`` for the stacks of ``project``: ``pulumi destroy`` through the Automation API's
    local-program workspace (the project's ``Pulumi.yaml`` and program; the backend ``pulumi login`` or
    ``$PULUMI_BACKEND_URL`` names), then the cloud's leftover check, which waits out the listing APIs'
    lag. The stack itself stays, emptied: ``pulumi stack rm`` would delete the project's config file."""

    def destroy(stack: Stack) -> list[str]:
        from pulumi import automation as auto

        from gpufleet.infra.automation import pulumi_cli
        from gpufleet.infra.backend import pulumi_backend_of

        cloud = pulumi_backend_of(stack.spec.provider.kind)
        cli = pulumi_cli()
        cloud.check_credentials(stack.spec)
        opts = auto.LocalWorkspaceOptions(
            work_dir=str(project), pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent))
        )
        with reporter.step(f"pulumi destroy: stack {stack.name} (cluster {stack.spec.name})"):
            try:
                selected = auto.select_stack(stack_name=stack.name, work_dir=str(project), opts=opts)
                result = selected.destroy(color="never", on_output=lambda line: reporter.info(line.rstrip()))
            except auto.CommandError as exc:
                tail = "\n".join(str(getattr(exc, "stderr", "") or exc).strip().splitlines()[-12:])
                raise ProvisionError(
                    f"pulumi destroy of stack '{stack.name}' failed:\n{tail}",
                    hint=f"run 'pulumi destroy --stack {stack.name}' in {project} and read its error",
                ) from None
        left = cloud.leftovers(stack.spec, ClusterState.for_name(stack.spec.name), reporter)
        if left:
            raise LeftoversError(
                f"stack '{stack.name}' is destroyed but these are still there: " + ", ".join(left),
                hint="run the reaper again; if they stay, remove them by hand",
            )
        deleted = (result.summary.resource_changes or {}).get(auto.OpType.DELETE, 0)
        return [f"Pulumi stack {stack.name}: {deleted} resource(s) destroyed, nothing left"]

    return destroy
