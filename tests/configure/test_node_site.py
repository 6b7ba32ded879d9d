"""The site a baked node configures itself from (configure.node_site): the relay folder's layout, with
the ansible-core the head relay would ship for that node's python3, and what the bake hands
roles/boot_configure."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from factories import make_host, make_inventory
from gpufleet.configure import head_ansible, node_site, relay
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import SilentReporter
from gpufleet.spec.model import Role


def test_the_site_archive_holds_what_the_node_runs_with_ansible_for_its_python(tmp_path: Path) -> None:
    path = node_site.build_archive(head_ansible.HeadPython.here(), tmp_path)
    with tarfile.open(path) as archive:
        names = set(archive.getnames())
    for needed in (
        "playbooks/site.yml",
        "roles/boot_configure/tasks/main.yml",
        "node/boot_configure.py",  # the unit's script, from the image's own copy
        "node/node_health.py",
        "ansible.cfg",
        "callback_plugins/gpufleet_events.py",
        "runner_callback/awx_display.py",
        "py/ansible/__init__.py",
        "py/jinja2/__init__.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n]
    # No inventory, key or secret: the site is the same for every cluster of the image.
    assert not [
        n for n in names if n.endswith(("inventory.yml", "id_cluster", "munge_key_file", "extravars.json"))
    ]


def test_the_bake_probes_its_builder_and_names_the_archive_and_the_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[str] = []

    class Shell:
        def __init__(self, inventory: Inventory) -> None:
            assert inventory.controller.name == "builder"

        def __call__(self, command: str, **_: object) -> tuple[int, str]:
            commands.append(command)
            here = head_ansible.HeadPython.here()
            return 0, f"/root\n{here.major} {here.minor} {here.machine} {here.glibc or '-'}\n4\n"

    monkeypatch.setattr(relay, "SshShell", Shell)
    monkeypatch.setattr(node_site, "cache_dir", lambda: tmp_path)
    builder = make_host(
        "builder", [Role.CONTROLLER, Role.LOGIN, Role.COMPUTE], ip="10.0.0.9", cpus=2, memory_mb=2048
    )
    inventory = make_inventory([builder], cluster="bake", connection=Connection())
    got = node_site.bake_vars(inventory, "ab" * 32, SilentReporter())
    assert got["boot_configure_image_hash"] == "ab" * 32
    assert Path(got["boot_configure_site_archive"]).parent == tmp_path / "node-site"
    assert Path(got["boot_configure_site_archive"]).exists() and len(commands) == 1
