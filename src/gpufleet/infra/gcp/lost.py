"""VMs in a stack's state that Compute Engine no longer runs, which the next ``gpufleet up`` replaces
(GCP audit 2026-11-27 M1).

Pulumi does not refresh before ``up``, so a VM that went away outside it stays in the state as it was and
``up`` changes nothing:
- a flex-start VM is deleted at the end of its ``max_run_duration`` (``instance_termination_action:
  DELETE``, ``compute._scheduling``), and a VM of a calendar-mode reservation when its window ends;
- a Spot VM is stopped when preempted (``instance_termination_action: STOP``): TERMINATED, its boot disk
  still billed, and nothing starts it.

Before each ``gpufleet up``, ``lost_vms`` reads every VM of the state from the Compute API (GET
``instances/{name}``): one that answers 404, and a Spot VM that is TERMINATED, is replaced (``pulumi up
--replace``: a new VM of the same name, which ``configure`` then sets up again). Any other VM stays: a
TERMINATED on-demand GPU VM came from host maintenance and restarts itself (``automatic_restart``), or was
stopped by someone on purpose. ``pulumi up`` from ``stacks/`` does none of this: ``pulumi up --replace
URN`` with the URN ``gpufleet up`` would name (docs/gcp.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.infra.gcp.leftovers import API_ROOTS, Get

INSTANCE_TYPE = "gcp:compute/instance:Instance"
COMPUTE = API_ROOTS["compute.googleapis.com"]


def _vms(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        resource
        for resource in deployment.get("resources") or []
        if resource.get("type") == INSTANCE_TYPE and not resource.get("delete")
    ]


def lost_vms(deployment: Mapping[str, Any], get: Get) -> dict[str, str]:
    """URN -> why, for each VM of a stack's exported deployment that the next ``up`` must replace."""
    lost: dict[str, str] = {}
    for resource in _vms(deployment):
        outputs = resource.get("outputs") or {}
        path = str(outputs.get("id") or resource.get("id") or "")  # projects/P/zones/Z/instances/NAME
        if not path.startswith("projects/"):
            continue
        name = path.rsplit("/", 1)[-1]
        status, body = get(f"{COMPUTE}/{path}")
        scheduling = (body or {}).get("scheduling") or outputs.get("scheduling") or {}
        model = str(scheduling.get("provisioningModel") or "")
        if status == 404:
            lost[resource["urn"]] = (
                f"VM {name} is gone (a flex-start VM past its max_run_duration, a reservation's window that "
                "ended, or a deletion outside gpufleet): a new one is made in its place"
            )
        elif status == 200 and (body or {}).get("status") == "TERMINATED" and model == "SPOT":
            lost[resource["urn"]] = (
                f"Spot VM {name} was stopped by a preemption: it is made again (its boot disk, still billed "
                "while stopped, goes with it)"
            )
    return lost
