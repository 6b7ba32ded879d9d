"""The two phases of every role, as gpufleet selects them: the bake runs ``--tags install``, a baked node's
configure ``--skip-tags install`` (gpufleet.pipeline). Ansible skips a task when ANY of its tags is skipped,
so a task tagged ``[install, configure]`` runs in the bake and never in a baked node's configure: the
containers role's preflight and verify, container_toolkit, gpu_health and the GPU roles' checks did not run
there (the same defect stopped roles/slurm's node reading, 0f77a6b). A task both phases need is tagged
``always``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

# Every group site.yml's plays name, with one host in each (gpu_stack and monitoring are made at run time
# by group_by; --list-tasks does not run them, so the inventory names them).
INVENTORY = """all:
  children:
    slurm_controller: {hosts: {head: {}}}
    slurm_login: {hosts: {head: {}}}
    compute: {hosts: {gpu-0: {}}}
    gpu_stack: {hosts: {gpu-0: {}}}
    monitoring: {hosts: {head: {}, gpu-0: {}}}
"""


def _tasks(tmp_path: Path, playbook: str, *selection: str) -> list[tuple[str, set[str]]]:
    """(``role : task``, its tags) for every task ``ansible-playbook --list-tasks`` lists."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY)
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "--list-tasks",
         *selection, str(ROOT / "playbooks" / playbook)],
        capture_output=True, text=True, timeout=300, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    tasks = []
    for line in listed.splitlines():
        name, sep, tags = line.strip().partition("\tTAGS: [")
        if sep and not name.startswith("play #"):
            tasks.append((name, {tag.strip() for tag in tags.rstrip("]").split(",") if tag.strip()}))
    return tasks


def _tagged(node: Any, where: str) -> Iterator[tuple[str, list[str]]]:
    """(where, tags) of every ``tags:`` in a parsed YAML file, an include's ``apply: {tags}`` among them."""
    if isinstance(node, list):
        for item in node:
            yield from _tagged(item, where)
    elif isinstance(node, dict):
        tags = node.get("tags")
        if tags is not None:
            yield f"{where}: {node.get('name', '?')}", [tags] if isinstance(tags, str) else list(tags)
        for value in node.values():
            yield from _tagged(value, where)


def test_no_task_is_tagged_with_both_phases() -> None:
    # Every role's task files, the dynamically included ones too (include_role with a variable name, as the
    # fabric play does, and include_tasks: --list-tasks does not open them).
    files = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
                    *ROOT.glob("playbooks/*.yml")])  # fmt: skip
    both = [
        where
        for path in files
        for where, tags in _tagged(yaml.safe_load(path.read_text()), str(path.relative_to(ROOT)))
        if {"install", "configure"} <= set(tags)
    ]
    # --skip-tags install skips each of them: a task both phases need is tagged always.
    assert not both, "\n".join(both)


def test_no_listed_task_inherits_both_phases(tmp_path: Path) -> None:
    # Tags add up through import_tasks and roles: a configure task imported under an install import is both.
    both = [name for name, tags in _tasks(tmp_path, "site.yml") if {"install", "configure"} <= tags]
    assert not both, both


def test_a_baked_nodes_configure_runs_the_checks_of_every_role(tmp_path: Path) -> None:
    configure = {name for name, _tags in _tasks(tmp_path, "site.yml", "--skip-tags", "install")}
    wanted = {
        "containers : Assert that the install method is one the role knows",
        "containers : Read enroot's version",
        "containers : Start a container with enroot as an unprivileged user",
        "container_toolkit : Check the inventory and the pin",
        "container_toolkit : Verify the toolkit",
        "gpu_health : Load the OS's variables",
        "nvidia_driver : Load the OS's variables",
        "cuda_toolkit : Verify the toolkit and record where it is",
        "nccl : Verify NCCL and record where it is",
        "nccl_tests : Assert that CUDA and NCCL are recorded",
        "gdrcopy : Assert that the mode and the version are ones the role knows",
        "pytorch : Verify torch in the virtualenv",
        "shared_fs : Assert that the inventory names a filesystem kind the role knows",
    }
    assert wanted <= configure, sorted(wanted - configure)


def test_the_node_independent_files_are_baked(tmp_path: Path) -> None:
    # Issue 34 item 1: what is the same on every node of every cluster goes in with the install phase (the
    # bake), and a baked node's configure does not write it again.
    baked = {
        "containers : Write enroot.conf",
        "containers : Name pyxis in the plugin stack",
        "containers : Include the plugin stack folder from plugstack.conf",
        "containers : Enable enroot's optional hooks (PMIx for srun --mpi=pmix inside containers)",
        "containers : Install enroot's unprivileged smoke test",
        "monitoring : Install the Slurm/job exporter",
        "monitoring : Write node_exporter's arguments",
    }
    install = {name for name, _tags in _tasks(tmp_path, "site.yml", "--tags", "install")}
    configure = {name for name, _tags in _tasks(tmp_path, "site.yml", "--skip-tags", "install")}
    assert baked <= install, sorted(baked - install)
    assert not baked & configure, sorted(baked & configure)
