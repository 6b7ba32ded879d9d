"""Validation releases nodes (Slurm): no job lands on a compute node before ``gpufleet validate`` proved it.

A dynamic compute node registers DRAINED with the reason ``gpufleet: not validated`` (roles/slurm,
docs/slurm.md), and a node validation failed stays drained with a ``gpufleet ...`` reason. Such a node is
*held*: validation runs its jobs there, and only there do user jobs stay off until it passed. Around the
suite (``suite.run_suite``):

1. ``hold``: when any node to validate is held, one reservation over every node to validate, for the user
   validation runs as, ``Flags=MAINT,IGNORE_JOBS``, ``Duration=UNLIMITED``; then the held nodes are resumed.
   Every job of the run asks for the reservation (``SlurmRunner.reservation``); a job that does not (any
   user's, the validating user's own) cannot start on a node in it, so a resumed node takes none. Slurm
   24.11.5's scontrol(1): a reservation's nodes serve only the jobs that request it (without ``MAGNETIC``,
   and ``FLEX`` is not set, so the run's jobs stay on its nodes); ``IGNORE_JOBS`` lets it cover nodes that
   run jobs; ``MAINT`` may overlap another reservation, and is accounted as maintenance. Unlimited, so that
   a run that dies leaves its nodes reserved, never free before they passed.
2. ``release``: each held node that passed (the run passed with it in the collectives, or the bisection
   cleared it) is let go; every other held node is drained again with its failing check as the reason (or,
   when no check names a node, ``gpufleet: not validated (<what failed>)``), and the reservation is deleted.
   Nodes in service before the run are left to the suite's own drain (``validation.drain_bad_nodes``).

A repaired node keeps its ``gpufleet ...`` reason until a run passes with it: it is validated again before it
takes jobs. No held node: no reservation, the run is as it was.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import ValidationRunError
from gpufleet.validate.slurm import SlurmRunner, SlurmState, drain_command

UNVALIDATED = "gpufleet: not validated"
REASON_PREFIX = "gpufleet"  # every reason gpufleet drains a node with starts so
# Slurm refuses to delete a reservation while any job that asked for it is not finished, running, pending
# or completing (24.11.5 src/slurmctld/reservation.c: delete_resv -> _is_resv_used ->
# _find_running_job_with_resv_ptr, !IS_JOB_FINISHED; "Reservation busy"): a job of the run that outlived it
# (a timed-out srun's allocation being cancelled) holds it for a moment.
DELETE_TRIES = 10
DELETE_DELAY = 3.0
# Slurm 24.11.5 marks a resumed drained node not responding until it registers again (node_mgr.c,
# update_node: NODE_RESUME -> _require_node_reg sets NODE_STATE_NO_RESPOND and pings at once): sinfo reads
# "idle*" for a moment, and the suite would take the node for unusable.
ANSWER_WAIT_S = 120.0
ANSWER_POLL_S = 2.0

_sleep: Callable[[float], None] = time.sleep
_clock: Callable[[], float] = time.monotonic


def reservation_name(cluster: str) -> str:
    return f"gpufleet-validate-{cluster}"


def held_nodes(states: Mapping[str, SlurmState]) -> dict[str, str]:
    """{node: its reason} for the nodes gpufleet keeps drained until validated: drained, answering, with a
    reason of gpufleet's (``UNVALIDATED``, or a failed check of an earlier run)."""
    return {
        node: state.reason
        for node, state in sorted(states.items())
        if state.drained and state.reason.startswith(REASON_PREFIX)
    }


def create_command(name: str, user: str, nodes: Iterable[str]) -> str:
    return shlex.join(
        [
            "scontrol", "create", "reservation", f"reservationname={name}", f"users={user}",
            "starttime=now", "duration=UNLIMITED", "flags=MAINT,IGNORE_JOBS", f"nodes={','.join(nodes)}",
        ]
    )  # fmt: skip


def delete_command(name: str) -> str:
    return shlex.join(["scontrol", "delete", f"reservation={name}"])


def resume_nodes_command(nodes: Iterable[str]) -> str:
    return shlex.join(["scontrol", "update", f"nodename={','.join(nodes)}", "state=resume"])


@dataclass
class Hold:
    """The nodes one validation run holds: the reservation, and the held nodes with their reasons."""

    runner: SlurmRunner
    reservation: str | None = None
    held: dict[str, str] = field(default_factory=dict)  # node -> the reason it was drained with
    released: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # held nodes drained again -> the reason
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "reservation": self.reservation,
            "held": dict(self.held),
            "released": list(self.released),
            "kept_drained": dict(self.kept),
            "errors": list(self.errors),
        }


def hold(runner: SlurmRunner, nodes: list[str], cluster: str) -> Hold:
    """Step 1 (module doc): reserve ``nodes`` for this run and resume the held ones. Raises
    ``ValidationRunError`` (and resumes nothing) when Slurm refuses the reservation."""
    found = Hold(runner, held=held_nodes(runner.slurm_states(nodes)))
    if not found.held:
        return found
    name = reservation_name(cluster)
    user = runner.user()  # the reservation's user: the one the run's sruns run as
    runner.executor.run(runner.as_admin(delete_command(name)), 60.0)  # a reservation a killed run left
    rc, _out, stderr = runner.executor.run(runner.as_admin(create_command(name, user, nodes)), 60.0)
    if rc != 0:
        raise ValidationRunError(
            f"Slurm refused the reservation that keeps jobs off {', '.join(found.held)} while they are "
            f"validated: {stderr.strip()[:300]}",
            hint="validate as a Slurm administrator (root, SlurmUser, or a user with passwordless sudo on "
            "the login node); the nodes stay drained",
        )
    found.reservation = name
    rc, _out, stderr = runner.executor.run(runner.as_admin(resume_nodes_command(found.held)), 60.0)
    if rc != 0:
        found.errors.append(f"resume {', '.join(found.held)}: {stderr.strip()[:200] or f'exit {rc}'}")
    runner.reservation = name
    _wait_until_answering(runner, list(found.held))
    return found


def _wait_until_answering(runner: SlurmRunner, nodes: list[str]) -> None:
    """Wait (``ANSWER_WAIT_S`` at most) until no resumed node reads not responding; one that still does is
    then judged by the suite as any other (its Slurm state fails its health check, and it stays drained)."""
    deadline = _clock() + ANSWER_WAIT_S
    while True:
        states = runner.slurm_states(nodes)
        waiting = [node for node in nodes if node not in states or states[node].state.endswith("*")]
        if not waiting or _clock() >= deadline:
            return
        _sleep(ANSWER_POLL_S)


def release(
    found: Hold,
    *,
    passed: bool,
    ran_on: Iterable[str],
    failed: Mapping[str, str],
    cleared: Iterable[str] = (),
    why: str = "",
) -> Hold:
    """Step 2 (module doc). ``passed``: the whole run passed; ``ran_on``: the nodes in its collective runs;
    ``failed``: {node: the check it failed}; ``cleared``: nodes the bisection found good; ``why``: what failed
    when no check names a node. Never raises: what Slurm refused is in ``errors``."""
    if found.reservation is None:
        return found
    ran = set(ran_on)
    good = (ran if passed else set()) | (set(cleared) & ran)
    for node, before in found.held.items():
        if node in good and node not in failed:
            found.released.append(node)
            continue
        reason = failed.get(node) or (f"{UNVALIDATED} ({why})" if why else before)
        found.kept[node] = reason[:200]
    for node, reason in found.kept.items():
        try:
            rc, _out, stderr = found.runner.executor.run(
                found.runner.as_admin(drain_command([node], reason)), 60.0
            )
        except ValidationRunError as exc:
            rc, stderr = 1, str(exc)
        if rc != 0:
            found.errors.append(f"drain {node}: {stderr.strip()[:200] or f'exit {rc}'}")
    found.errors.extend(delete(found.runner, found.reservation))
    found.runner.reservation = None
    return found


def delete(runner: SlurmRunner, name: str) -> list[str]:
    """Delete the reservation, waiting while jobs that asked for it run or pend; the error, if it stays."""
    stderr = ""
    for attempt in range(DELETE_TRIES):
        try:
            rc, _out, stderr = runner.executor.run(runner.as_admin(delete_command(name)), 60.0)
        except ValidationRunError as exc:
            rc, stderr = 1, str(exc)
        if rc == 0:
            return []
        if attempt + 1 < DELETE_TRIES:
            _sleep(DELETE_DELAY)
    return [
        f"the reservation {name} is still there ({stderr.strip()[:200]}): its nodes take no other job until "
        f"it is deleted ({delete_command(name)})"
    ]
