"""Checks for bare metal: the hand-written inventory exists, reads, and names only known machine types.

``provider.inventory`` is read relative to the spec file (``load_spec`` resolves it). Every host's
``gpufleet_instance_type`` must be ``baremetal`` (a machine with no catalog entry: controller, login) or a
catalog type, because the roles and the gate take GPU counts, fabric and baselines from the catalog.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

from gpufleet.catalog import Catalog
from gpufleet.errors import GpufleetError
from gpufleet.inventory.model import Inventory
from gpufleet.preflight.base import Finding, check
from gpufleet.severity import Severity
from gpufleet.spec.model import BaremetalProvider, ClusterSpec

GENERIC_TYPE = "baremetal"
_PATH = "provider.inventory"


def _finding(message: str) -> Finding:
    return Finding(Severity.ERROR, "baremetal_inventory", _PATH, message)


@check("baremetal_inventory", providers=("baremetal",))
def baremetal_inventory(spec: ClusterSpec, catalog: Catalog) -> Iterator[Finding]:
    provider = spec.provider
    assert isinstance(provider, BaremetalProvider)
    path = Path(provider.inventory)
    if not path.exists():
        yield _finding(
            f"the inventory {path} does not exist; give the path of your Ansible inventory (relative "
            "to the spec file), e.g. ../inventories/examples/baremetal.yml"
        )
        return
    if not path.is_file():
        yield _finding(f"the inventory {path} is not a file; give the inventory file itself")
        return
    try:
        inventory = Inventory.read(path)
    except GpufleetError as exc:
        yield _finding(exc.message.replace("\n", " "))
        return
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        yield _finding(f"the inventory {path} cannot be read: {exc}")
        return
    known = sorted(item.name for item in catalog.for_provider("baremetal"))
    for host in inventory.hosts:
        if host.instance_type == GENERIC_TYPE or catalog.get(host.instance_type) is not None:
            continue
        close = difflib.get_close_matches(host.instance_type, known, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        yield _finding(
            f"host {host.name} in {path} has gpufleet_instance_type '{host.instance_type}', which the "
            f"catalog does not know{hint}; use one of: {', '.join([GENERIC_TYPE, *known])}"
        )
