"""The files in src/gpufleet/node run on the nodes with the node's own Python and no gpufleet installed: none
of them may import the rest of gpufleet, and each loads in an interpreter where ``gpufleet`` cannot be
imported at all."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import source_tree
from gpufleet.node import FOLDER

NODE_FILES = sorted(path for path in FOLDER.glob("*.py") if path.name != "__init__.py")

# Loads a file as a module (its top level runs, not its main) with every gpufleet import refused.
_LOAD_WITHOUT_GPUFLEET = """
import importlib.abc, runpy, sys

class NoGpufleet(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "gpufleet" or name.startswith("gpufleet."):
            raise ImportError(f"{name} is not on the node")
        return None

sys.meta_path.insert(0, NoGpufleet())
runpy.run_path(sys.argv[1], run_name="on_the_node")
"""


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(source_tree.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            found.add("." * node.level + (node.module or ""))  # relative: inside the gpufleet package
    return found


def test_the_node_folder_holds_the_files_the_roles_copy() -> None:
    assert [path.name for path in NODE_FILES] == ["boot_configure.py", "node_health.py", "slurm_exporter.py"]


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda path: path.name)
def test_a_node_file_imports_nothing_of_gpufleet(path: Path) -> None:
    gpufleet = sorted(
        name for name in _imports(path) if name.split(".")[0] == "gpufleet" or name.startswith(".")
    )
    assert not gpufleet, f"{path.name} runs on the nodes without gpufleet, yet imports {gpufleet}"


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda path: path.name)
def test_a_node_file_loads_where_gpufleet_cannot_be_imported(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / path.name  # alone in a folder, as the roles install it
    shutil.copyfile(path, copy)
    done = subprocess.run(
        [sys.executable, "-I", "-c", _LOAD_WITHOUT_GPUFLEET, str(copy)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_no_role_reaches_into_the_source_tree() -> None:
    """The roles take the node files from gpufleet_node_files (a variable of each role, defaulting to it), not
    from ``role_path/../../src``: a role copied elsewhere, or the head's upload, has no src/ beside it."""
    roles = FOLDER.parents[2] / "roles"
    reaching = sorted(
        str(path.relative_to(roles))
        for path in roles.rglob("*.yml")
        if "../../src" in path.read_text(encoding="utf-8")
    )
    assert not reaching, f"{reaching} copy from role_path/../../src; name the file under gpufleet_node_files"
