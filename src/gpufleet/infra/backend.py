"""Dispatch ``up``, ``status`` and ``down`` to the spec's backend; every backend returns the same inventory.

- local: podman containers on this machine (gpufleet.infra.local)
- aws, gcp: the Pulumi program through the Automation API (gpufleet.infra.automation)
- baremetal: the machines exist; ``up`` reads the user's inventory, ``down`` destroys nothing
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.errors import LeftoversError
from gpufleet.inventory.model import Inventory
from gpufleet.lifecycle.state import ClusterState
from gpufleet.lifecycle.teardown import Teardown
from gpufleet.progress import Reporter
from gpufleet.spec.model import BaremetalProvider, ClusterSpec, LocalProvider


def up(spec: ClusterSpec, state: ClusterState, reporter: Reporter, spec_path: Path | None) -> Inventory:
    state.begin(spec, spec_path)
    state.ensure_munge_key()
    kind = spec.provider.kind
    try:
        if kind == "local":
            from gpufleet.infra.local.cluster import LocalCluster

            inventory = LocalCluster(spec, state, reporter).up()
        elif kind == "baremetal":
            inventory = _baremetal_inventory(spec, spec_path)
        else:
            from gpufleet.infra import automation

            inventory = automation.up(spec, state, reporter)
        inventory = with_software(inventory, spec)
        inventory.write(state.inventory_file)
    except BaseException as exc:
        state.mark("up", "failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        raise
    state.mark("up", "done", hosts=len(inventory.hosts))
    return inventory


def with_software(inventory: Inventory, spec: ClusterSpec) -> Inventory:
    """The spec's ``software`` block as the inventory's ``gpufleet_software``, which every role reads.

    A bare-metal inventory may carry its own ``gpufleet_software``; the spec's values win, key by key.
    The local backend has no NVIDIA repository, so its GPU stack always comes from PyPI.
    """
    software = {**inventory.software, **spec.software.model_dump(mode="json")}
    if isinstance(spec.provider, LocalProvider) and spec.provider.gpu_stack:
        software["gpu_packages"] = "pypi"
    return inventory.model_copy(update={"software": software})


def _baremetal_inventory(spec: ClusterSpec, spec_path: Path | None) -> Inventory:
    assert isinstance(spec.provider, BaremetalProvider)
    path = Path(spec.provider.inventory).expanduser()
    if not path.is_absolute() and spec_path is not None:
        path = spec_path.parent / path
    return Inventory.read(path)


def status(spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
    record = state.load() if state.exists() else None
    result: dict[str, Any] = {"cluster": spec.name, "provider": spec.provider.kind, "state": record}
    if spec.provider.kind == "local":
        from gpufleet.infra.local.cluster import LocalCluster
        from gpufleet.progress import SilentReporter

        result.update(LocalCluster(spec, state, SilentReporter()).status())
    elif spec.provider.kind in ("aws", "gcp") and record is not None:
        from gpufleet.infra import automation

        result.update(automation.status(spec, state))
    return result


def down(spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> Teardown:
    kind = spec.provider.kind
    if kind == "local":
        from gpufleet.infra.local.cluster import LocalCluster

        return LocalCluster(spec, state, reporter).down()
    if kind == "baremetal":
        removed = state.remove()
        return Teardown(removed=removed)
    from gpufleet.infra import automation

    teardown = automation.down(spec, state, reporter)
    if teardown.leftovers:
        raise LeftoversError(
            "destroy finished but resources tagged for the cluster remain: " + ", ".join(teardown.leftovers),
            hint="run 'gpufleet down' again; the state folder is kept until nothing is left",
        )
    teardown.removed.extend(state.remove())
    return teardown
