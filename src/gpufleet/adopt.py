"""``gpufleet adopt``: a cluster that ``pulumi up`` made (``stacks/``, CI) becomes a gpufleet cluster.

The other way ``up``: nothing is created. The stack's outputs (read through the Automation API's stack
selection, or from a file ``pulumi stack output --json --show-secrets`` wrote) give the same state folder
and inventory that ``gpufleet up`` writes for the spec, so ``configure``, ``validate``, ``status`` and
``down`` work on it; ``down`` destroys through the stack (``gpufleet.infra.adopted``).

The stack and the cluster: a stack's name is the project's (``p5-fsx``), the cluster's is the spec's
(``llm-p5``); the stack's ``cluster`` output, which the component takes from its spec, ties them. Adopt
refuses a stack whose ``cluster`` or ``provider`` output is not the spec's, naming both.

The stack's secret output ``ssh_private_key`` (``gpufleet.infra.stack_access``) becomes the cluster's key
in the state folder (mode 0600), which the inventory's connection names; it is never printed.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import SpecError, StateError
from gpufleet.infra import stack_access
from gpufleet.infra.adopted import RECORD_KEY, AdoptedStack, adopted_of, read_outputs
from gpufleet.infra.backend import pulumi_backend_of
from gpufleet.infra.software import with_software
from gpufleet.inventory.model import Inventory
from gpufleet.lifecycle.lock import hold_cluster_lock
from gpufleet.lifecycle.phases import tracked
from gpufleet.progress import Reporter
from gpufleet.providers import PULUMI_KINDS
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState


def read_outputs_file(path: Path) -> dict[str, Any]:
    """A stack's outputs as ``pulumi stack output --json --show-secrets`` prints them: one JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StateError(
            f"no stack outputs file at {path}",
            hint="write it with: pulumi stack output --json --show-secrets --stack STACK > FILE",
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(
            f"{path} is not a stack's outputs (JSON): {exc}",
            hint="write it with: pulumi stack output --json --show-secrets --stack STACK > FILE",
        ) from None
    if not isinstance(data, dict):
        raise StateError(f"{path} holds a JSON {type(data).__name__}, not the stack's outputs (an object)")
    return data


def check_outputs(spec: ClusterSpec, stack: str, exported: dict[str, Any], source: str) -> None:
    """Refuse outputs that are not those of the spec's cluster, or hold no cluster at all."""
    if not exported.get("hosts"):
        raise StateError(
            f"{source} has no cluster outputs (no hosts): stack '{stack}' was never brought up, or was "
            "destroyed",
            hint=f"run 'gpufleet stack-pin --stack {stack}' and 'pulumi up --stack {stack}' in its project "
            "first",
        )
    lost = [str(host.get("name")) for host in exported["hosts"] if not host.get("private_ip")]
    if lost:
        raise StateError(
            f"stack '{stack}' has host(s) without an address: {', '.join(lost)} (their instance is no longer "
            "running: a spot interruption, a manual termination); configure would fail on them",
            hint="replace their fleet: 'pulumi up --replace URN --stack "
            f"{stack}' with the fleet's URN ('pulumi stack --show-urns'), then adopt again",
        )
    cluster, provider = exported.get("cluster"), exported.get("provider")
    if cluster != spec.name:
        raise StateError(
            f"stack '{stack}' holds cluster '{cluster}', but the spec names cluster '{spec.name}'",
            hint=f"adopt it with the spec its config names (gpufleet:spec, whose name is '{cluster}'), or "
            "pass the stack that was made from this spec",
        )
    if provider != spec.provider.kind:
        raise StateError(
            f"stack '{stack}' holds a {provider} cluster, but the spec's provider is {spec.provider.kind}",
            hint="adopt it with the spec its config names (gpufleet:spec)",
        )


def _write_key(state: ClusterState, private_openssh: str) -> None:
    """The stack's key as the cluster's key: private 0600 in a 0700 folder, its public key beside it."""
    public = stack_access.public_of(private_openssh)  # also refuses what is not an OpenSSH private key
    state.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state.ssh_dir.chmod(0o700)
    tmp = state.private_key.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(private_openssh if private_openssh.endswith("\n") else private_openssh + "\n")
    tmp.replace(state.private_key)
    state.public_key.write_text(public.strip() + "\n", encoding="utf-8")


def _private_key(stack: str, exported: dict[str, Any], source: str, reporter: Reporter) -> str | None:
    key = exported.get(stack_access.ACCESS_KEY_OUTPUT)
    if key == stack_access.MASKED_SECRET:
        raise StateError(
            f"{source} hides the secret output {stack_access.ACCESS_KEY_OUTPUT} ('{key}')",
            hint=f"write the file with: pulumi stack output --json --show-secrets --stack {stack} > FILE",
        )
    if not key:
        reporter.info(
            f"stack '{stack}' exports no {stack_access.ACCESS_KEY_OUTPUT}: Ansible connects with your own "
            "SSH keys (the spec's access.ssh_public_key must be authorized on the nodes)"
        )
        return None
    try:
        stack_access.public_of(str(key))
    except ValueError as exc:
        raise StateError(
            f"{source}: output {stack_access.ACCESS_KEY_OUTPUT} is not an OpenSSH private key ({exc})",
            hint="export the key's private_key_openssh (pulumi-tls), as stacks/__main__.py does",
        ) from None
    return str(key)


def _times(spec: ClusterSpec, exported: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """When the stack says the cluster was made and expires: its ``created_at`` output, else its
    ``expires_at`` less the spec's ttl."""
    created = exported.get(stack_access.CREATED_OUTPUT)
    if created:
        start = stack_access.created_at(str(created))
        return start, start + spec.lifetime.ttl
    expires = exported.get("expires_at")
    if expires:
        end = stack_access.created_at(str(expires))
        return end - spec.lifetime.ttl, end
    return None


def adopt(
    spec: ClusterSpec,
    reporter: Reporter,
    *,
    stack: str,
    project_dir: Path,
    outputs_file: Path | None = None,
    spec_path: Path | None = None,
) -> tuple[ClusterState, Inventory]:
    """Write the state folder and inventory of the cluster ``stack`` made; ``down`` destroys through it."""
    if spec.provider.kind not in PULUMI_KINDS:
        raise SpecError(
            f"provider '{spec.provider.kind}' has no Pulumi stack to adopt; only "
            f"{', '.join(PULUMI_KINDS)} do",
            hint="run 'gpufleet up SPEC' for it",
        )
    hold_cluster_lock(spec.name, "adopt")
    project = AdoptedStack(stack=stack, project_dir=project_dir.resolve())
    state = ClusterState.for_name(spec.name)
    before = adopted_of(state)
    if state.exists() and before is None:
        raise StateError(
            f"cluster '{spec.name}' was made here by 'gpufleet up', not by stack '{stack}'",
            hint="'gpufleet down SPEC' removes it first; or name the spec's cluster differently",
        )
    if before is not None and before.stack != stack:
        raise StateError(
            f"cluster '{spec.name}' is already adopted from stack '{before.stack}', not '{stack}'",
            hint=f"'gpufleet down SPEC' destroys it through '{before.stack}' first, or pass --stack "
            f"{before.stack}",
        )
    if outputs_file is not None:
        exported, source = read_outputs_file(outputs_file), str(outputs_file)
    else:
        exported, source = read_outputs(project), str(project)
    check_outputs(spec, stack, exported, source)
    key = _private_key(stack, exported, source, reporter)

    state.begin(spec, spec_path)
    times = _times(spec, exported)
    if times is not None:
        state.update(created_at=times[0].isoformat(), expires_at=times[1].isoformat())
    # The stack's id, tagged on its resources; none for a stack brought up before ids (then no id is made
    # up here: the leftover check counts every resource of the name, never fewer than the cluster's).
    state.update(cluster_id=str(exported.get(stack_access.CLUSTER_ID_OUTPUT) or "") or None)
    state.update(**{RECORD_KEY: project.to_record()})
    state.ensure_munge_key()
    with tracked(state, "up"):
        if key is not None:
            _write_key(state, key)
        outputs = stack_access.contract_outputs(exported)
        cloud = pulumi_backend_of(spec.provider.kind)  # a Pulumi kind: refused above otherwise
        inventory = with_software(cloud.inventory_from_outputs(spec, state, outputs), spec)
        inventory.write(state.inventory_file)
    state.mark("up", "done", hosts=len(inventory.hosts), adopted=stack)
    reporter.info(f"adopted cluster {spec.name} from {project}: 'gpufleet down' destroys through it")
    return state, inventory
