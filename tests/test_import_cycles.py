"""The import graph of src/gpufleet (top-level, lazy in-function and ``TYPE_CHECKING`` imports alike: a
type checker's import is an arrow too) has no cycle through infra, no cycle but the listed ones, no cycle
between the packages (folders) at all, and no arrow from infra up into bake: the stack driver, the backend
table, the bakers and the Pulumi program import downward only (docs/architecture.md, the module map and the
layer order)."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import source_tree

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpufleet"

# Cycles known to be harmless and kept on purpose, with the reason; none of them may touch infra.
ALLOWED_CYCLES = {
    # The check registry: preflight.base imports the check modules for their @check side effect, and they
    # import base's decorator (a plugin registry, not layering).
    "gpufleet.preflight",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The gpufleet modules ``path`` imports, at run time or for a type checker (``from a import b``:
    ``a.b`` if it is a module)."""
    tree = source_tree.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return {name for name in found if name in modules}


def graph_here() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(paths)) - {name} for name, path in paths.items()}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """``graph_here`` in a fresh interpreter, once: this parses every source file, and on CPython 3.11.7 a
    parse that another conversion interleaves with (a finalizer run by the garbage collector inside it, or
    another thread of the worker) raises "SystemError: AST constructor recursion depth mismatch"
    (tests/source_tree.py; CI of 2026-11-28 hit it here)."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_import_cycles import graph_here\n"
        "print(json.dumps({k: sorted(v) for k, v in graph_here().items()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return {name: set(imported) for name, imported in json.loads(done.stdout).items()}


def room(module: str) -> str:
    """The folder (or top-level module) of the package a module lives in: ``gpufleet.infra.aws.fleet`` is
    in ``infra``, ``gpufleet.pipeline`` is ``pipeline``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between rooms: room ``a`` imports room ``b`` when any module of ``a`` imports one
    of ``b``."""
    rooms: dict[str, set[str]] = {room(module): set() for module in graph}
    for module, imported_modules in graph.items():
        rooms[room(module)].update(room(imported) for imported in imported_modules)
    return {name: imported - {name} for name, imported in rooms.items()}


def arrows(graph: dict[str, set[str]], source: str, target: str) -> list[str]:
    """Every import from a module of room ``source`` to one of room ``target``, as ``a -> b``."""
    return sorted(
        f"{module} -> {imported}"
        for module, imported_modules in graph.items()
        if room(module) == source
        for imported in imported_modules
        if room(imported) == target
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_lazy_and_type_checking_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from a import b\n"
        "if TYPE_CHECKING:\n    import c\n"
        "def f():\n    from d import e\n    import f\n"
    )
    assert imports_of(module, {"a", "a.b", "c", "d", "f"}) == {"a.b", "c", "d", "f"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = {"gpufleet.infra.x": {"gpufleet.bake.y"}, "gpufleet.bake.y": {"gpufleet.infra.backend"}}
    assert arrows(graph, "infra", "bake") == ["gpufleet.infra.x -> gpufleet.bake.y"]
    assert (room("gpufleet.infra.aws.fleet"), room("gpufleet.pipeline")) == ("infra", "pipeline")
    # Two packages that lean on each other through different modules: no module cycle, a room cycle.
    leaning = {
        "gpufleet.infra.aws.component": {"gpufleet.preflight.base"},
        "gpufleet.preflight.base": set(),
        "gpufleet.preflight.head_size": {"gpufleet.infra.backend"},
        "gpufleet.infra.backend": set(),
    }
    assert cycles(leaning) == []
    assert cycles(room_graph(leaning)) == [["infra", "preflight"]]


def test_no_import_cycle_in_the_package_but_the_listed_ones():
    found = cycles(import_graph())
    unexplained = [c for c in found if not any(all(m.startswith(p) for m in c) for p in ALLOWED_CYCLES)]
    assert not unexplained, f"import cycles: {unexplained}"


def test_no_cycle_between_the_packages():
    """Folder level: no package imports, through any of its modules, a package that imports it back
    (inventory.model and inventory.stack were one such pair inside a package; infra and preflight, and
    configure, validate and infra through them, were such packages until their shared leaves moved down:
    ``gpufleet.providers``, ``gpufleet.spec.durable``, ``gpufleet.kube.api.api_for``)."""
    graph = import_graph()
    found = cycles(room_graph(graph))
    shown = [
        " <-> ".join(cycle)
        + ": "
        + "; ".join(a for s in cycle for t in cycle if s != t for a in arrows(graph, s, t))
        for cycle in found
    ]
    assert not found, "import cycles between packages: " + " | ".join(shown)


def test_no_import_cycle_through_infra():
    through_infra = [c for c in cycles(import_graph()) if any(m.startswith("gpufleet.infra") for m in c)]
    assert not through_infra, f"import cycles through infra: {through_infra}"


def test_no_arrow_from_infra_up_into_bake():
    """bake stands on infra: the bakers are built from the backend table (``gpufleet.bake.baker``), the
    clouds' image facts are infra's own (``gpufleet.infra.images``, each cloud's ``images.py``), and no
    module of infra imports bake, not even for a type checker."""
    assert not arrows(import_graph(), "infra", "bake"), arrows(import_graph(), "infra", "bake")
