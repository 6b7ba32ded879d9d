"""Expire clusters: find the ones past their lifetime and tear them down.

Two sources: the state folders on this machine (every cluster ``gpufleet up`` made here, with the spec it
was made from, whose ``expires_at`` every ``up`` rewrites), and the clouds' expiry tags and labels
(``gpufleet:expires-at``, ``gpufleet-expires-at``): clusters made from CI with ``pulumi up`` have no state
folder here. Those are destroyed through the stack that made them when a Pulumi project folder
(``stacks/``) is given: ``reap_stacks`` finds the one stack whose spec names the expired cluster
(``gpufleet.infra.stack_configs.project_stacks``), asks the stack itself (its outputs, rewritten by every
``pulumi up``: ``infra.adopted.stack_record``) whether the cluster it holds now is the one the tags name
(the same id) and is past its expiry, and only then destroys it; without a project they are listed.

Every destroy here is ``lifecycle.teardown.run``: the durable copy exported first (or nothing destroyed),
then the destroy, then the leftover check, as ``gpufleet down`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.infra.adopted import AdoptedStack, StackRecord
from gpufleet.infra.stack_configs import Stack
from gpufleet.lifecycle.durable_copy import DurableCopyOptions
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
    cluster_id: str | None = None  # the id its resources carry; None: tagged before ids


StackRecordOf = Callable[[Stack], StackRecord | None]  # what the stack holds now (its outputs)
StackDestroy = Callable[[Stack, StackRecord], list[str]]  # teardown.run of the stack; raises GpufleetError


def reap_stacks(
    expired: list[CloudExpired],
    stacks: dict[str, list[Stack]],
    destroy: StackDestroy,
    *,
    record: StackRecordOf,
    now: datetime | None = None,
    dry_run: bool = False,
) -> list[ReapItem]:
    """Destroy, through its stack, every cluster the clouds' tags say is expired (``dry_run``: say so).

    A cluster is destroyed only when exactly one stack of the project makes it, on the same cloud, its
    spec does not ask to be kept (``lifetime.on_expiry: warn``), and the stack itself (``record``) holds
    that very cluster (the tags' id, when both know one) past its expiry: the stack's outputs are the
    authority, the tags only a way to find it."""
    now = now or datetime.now(UTC)
    items: list[ReapItem] = []
    seen: set[tuple[str, str, str | None]] = set()
    for entry in expired:
        if (entry.provider, entry.cluster, entry.cluster_id) in seen:
            continue  # found in two regions or projects: one stack, one destroy
        seen.add((entry.provider, entry.cluster, entry.cluster_id))
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
        else:
            item.action = _act(entry, makers[0], destroy, record, now, dry_run, item)
        items.append(item)
    return items


def _act(
    entry: CloudExpired,
    stack: Stack,
    destroy: StackDestroy,
    record: StackRecordOf,
    now: datetime,
    dry_run: bool,
    item: ReapItem,
) -> str:
    """What the reaper does with one expired cluster whose one stack is ``stack``."""
    try:
        held = record(stack)
    except GpufleetError as exc:
        return f"failed: stack {stack.name}: cannot read its outputs: {exc.message.splitlines()[0]}"
    if held is None:
        return (
            f"skipped: stack {stack.name} holds no cluster now (never brought up, or destroyed): what "
            f"carries the tags is left of an earlier one; list it with 'gpufleet leftovers "
            f"{stack.spec_path.name}' and remove it by hand"
        )
    if held.cluster_id and entry.cluster_id and held.cluster_id != entry.cluster_id:
        return (
            f"skipped: the expired resources carry cluster id {entry.cluster_id}, stack {stack.name} holds "
            f"cluster id {held.cluster_id} (made again under the same name): they are left of the earlier "
            "cluster; list them with 'gpufleet leftovers' and remove them by hand"
        )
    if held.expires_at is not None and held.expires_at > now:
        return (
            f"kept: stack {stack.name} says the cluster expires at {held.expires_at.isoformat()} (a later "
            "up moved it; older resources still carry the earlier tag)"
        )
    if dry_run:
        return f"would destroy (stack {stack.name})"
    try:
        item.removed = destroy(stack, held)
    except GpufleetError as exc:
        return f"failed: stack {stack.name}: {exc.message.splitlines()[0]}"
    return f"destroyed (stack {stack.name})"


def project_record(project: Path) -> StackRecordOf:
    """A ``StackRecordOf`` for the stacks of ``project``: their outputs, read through the project."""
    from gpufleet.infra.adopted import stack_record

    return lambda stack: stack_record(AdoptedStack(stack=stack.name, project_dir=project))


def project_stack_destroy(
    project: Path, reporter: Reporter, durable: DurableCopyOptions | None = None
) -> StackDestroy:
    """A ``StackDestroy`` for the stacks of ``project``: ``lifecycle.teardown.run`` of the stack (export
    the durable copy or refuse, ``pulumi destroy`` through the project's own ``Pulumi.yaml``, program and
    backend, then the leftover check of the id the stack held, which waits out the listing APIs' lag). The
    stack itself stays, emptied: ``pulumi stack rm`` would delete the project's config file."""

    def destroy(stack: Stack, held: StackRecord) -> list[str]:
        from gpufleet.lifecycle.teardown import down_project_stack

        adopted = AdoptedStack(stack=stack.name, project_dir=project)
        report = down_project_stack(stack.spec, adopted, reporter, durable, held.cluster_id)
        report.raise_for_leftovers()
        return report.durable_copy + report.removed

    return destroy
