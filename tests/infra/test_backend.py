"""The backend table: one backend per provider, all with the same names; infra never imports lifecycle."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import get_args

import pytest

from gpufleet.infra.automation import PulumiBackend
from gpufleet.infra.backend import BACKENDS, PULUMI_KINDS, Backend
from gpufleet.spec.model import ClusterSpec

SRC = Path(__file__).resolve().parents[2] / "src" / "gpufleet"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_every_provider_kind_has_a_backend():
    models = get_args(ClusterSpec.model_fields["provider"].annotation)
    kinds = {get_args(model.model_fields["kind"].annotation)[0] for model in models}
    assert kinds == {"local", "baremetal", "aws", "gcp"}, kinds
    assert set(BACKENDS) == kinds


@pytest.mark.parametrize("kind", sorted(BACKENDS))
def test_each_provider_folder_exports_a_backend_with_the_same_methods(kind):
    module = importlib.import_module(BACKENDS[kind].module)
    backend = module.backend
    assert backend.kind == kind
    for name, member in inspect.getmembers(Backend, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert callable(getattr(backend, name, None)), f"{kind} backend lacks {name}"
        wanted = list(inspect.signature(member).parameters)
        got = ["self", *inspect.signature(getattr(backend, name)).parameters]
        assert got == wanted, f"{kind}.{name}{got} differs from Backend.{name}{wanted}"
    if kind in PULUMI_KINDS:
        assert isinstance(backend, PulumiBackend)
        component = {name for name in module.__all__ if name.startswith("GpuCluster")}
        assert len(component) == 2 and any(name.endswith("Args") for name in component), module.__all__
        assert any(name.endswith("MockCloud") for name in module.__all__), module.__all__


def test_no_module_under_infra_imports_lifecycle_or_the_cli():
    offenders = [
        f"{path.relative_to(SRC)} imports {name}"
        for path in sorted((SRC / "infra").rglob("*.py"))
        for name in _imports(path)
        if name.startswith(("gpufleet.lifecycle", "gpufleet.cli", "gpufleet.pipeline"))
    ]
    assert not offenders, offenders


def test_catalog_facts_import_no_cloud_sdk():
    for path in sorted((SRC / "catalog").glob("*.py")):
        heavy = {
            n for n in _imports(path) if n.split(".")[0] in ("pulumi", "pulumi_aws", "pulumi_gcp", "boto3")
        }
        assert not heavy, f"{path.name} imports {heavy}"


def test_only_the_backend_table_names_the_providers_in_infra():
    """No provider if/elif outside the table: the driver and the shared modules of infra never compare a
    provider kind (each provider folder may know its own)."""
    shared = [p for p in (SRC / "infra").glob("*.py") if p.name != "backend.py"]
    for path in shared:
        text = path.read_text(encoding="utf-8")
        for token in ('kind == "', "AwsProvider", "GcpProvider", "LocalProvider", "BaremetalProvider"):
            assert token not in text, f"{path.name} branches on a provider ({token})"
