"""What a baked node carries to configure itself: the site archive the bake unpacks into the image.

A node that configures itself at boot (``gpufleet.node.boot_configure``) runs the same playbooks and roles
as ``gpufleet configure`` from here or from the head, with an ansible-core that runs on the image's own
python3. That ansible-core is chosen as the head relay chooses it (``head_ansible.for_head``: this
machine's own where the node has its Python minor version and architecture, else the downloaded wheels of
a release that supports it), and the archive's layout is the relay folder's (``relay.add_site``), so the
node's command line is the head's (``relay.play_command``) with ``-c local``.

The bake probes its builder's python3 (``relay.probe_head``: the same probe), builds the archive for it
into gpufleet's cache, and hands roles/boot_configure its path and the image's hash as variables of the
install phase (``bake_vars``); the role unpacks it into ``/opt/gpufleet/site`` and enables the unit.
"""

from __future__ import annotations

import hashlib
import tarfile
import time
from pathlib import Path

from gpufleet.cache import cache_dir
from gpufleet.configure import head_ansible, relay
from gpufleet.errors import ConfigureError
from gpufleet.inventory.model import Inventory
from gpufleet.progress import Reporter


def build_archive(python: head_ansible.HeadPython, folder: Path) -> Path:
    """The site archive for a node of ``python``, in ``folder`` (named for its content's inputs)."""
    shipped = head_ansible.for_head(python)
    key = hashlib.sha256(f"{shipped.release}-{python.text}-{python.machine}".encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"site-{key}.tar.gz"
    partial = path.with_suffix(".partial")
    with tarfile.open(partial, mode="w:gz", compresslevel=1) as archive:
        relay.add_site(archive, relay.shipped_payload(shipped))
    partial.replace(path)  # rebuilt for each bake: the roles it carries are the bake's own
    return path


def bake_vars(inventory: Inventory, digest: str, reporter: Reporter, *, wait_s: float = 0) -> dict[str, str]:
    """The install phase's variables of roles/boot_configure for a bake of ``digest`` on the inventory's
    one builder node (probed over its SSH, as the relay probes the head; for up to ``wait_s`` while a cloud
    builder boots)."""
    builder = inventory.controller
    deadline = time.monotonic() + wait_s
    found: relay.HeadProbe | None = None
    while found is None:
        try:
            found = relay.probe_head(relay.SshShell(inventory), builder.name)
        except ConfigureError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(15)
    archive = build_archive(found.python, cache_dir() / "node-site")
    reporter.info(f"{builder.name} runs python3 {found.python.text}: the node's site is {archive.name}")
    return {"boot_configure_site_archive": str(archive), "boot_configure_image_hash": digest}
