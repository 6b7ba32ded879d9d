"""The backend table: one backend per provider, all with the same names; infra never imports lifecycle."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import get_args

import pytest

import source_tree
from gpufleet.infra.backend import Backend
from gpufleet.infra.pulumi_stack import PulumiBackend
from gpufleet.providers import BACKENDS, PULUMI_KINDS
from gpufleet.spec.model import ClusterSpec

SRC = Path(__file__).resolve().parents[2] / "src" / "gpufleet"


def _imports(path: Path) -> set[str]:
    tree = source_tree.parse(path.read_text(encoding="utf-8"))
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
    assert kinds == {"local", "baremetal", "aws", "gcp", "azure", "kubernetes"}, kinds
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
            n
            for n in _imports(path)
            if n.split(".")[0]
            in ("pulumi", "pulumi_aws", "pulumi_gcp", "pulumi_azure_native", "boto3", "azure")
        }
        assert not heavy, f"{path.name} imports {heavy}"


PROVIDER_KINDS = frozenset({"aws", "gcp", "azure", "local", "baremetal", "kubernetes"})
PROVIDER_MODELS = frozenset(
    {
        "AwsProvider",
        "GcpProvider",
        "AzureProvider",
        "LocalProvider",
        "BaremetalProvider",
        "KubernetesProvider",
    }
)
_ONE_PROVIDER = "checks registered for one provider (@check(providers=...)) narrow the spec's model"
# Where a provider may be named outside the table, and why. Nothing else in src/gpufleet compares a
# provider kind or asks which provider model a spec holds: it asks the spec's backend.
MAY_NAME_PROVIDERS = {
    "providers.py": "the table itself",
    "infra/aws/": "a provider folder knows its own provider",
    "infra/gcp/": "a provider folder knows its own provider",
    "infra/azure/": "a provider folder knows its own provider",
    "infra/local/": "a provider folder knows its own provider",
    "infra/baremetal/": "a provider folder knows its own provider",
    "infra/kubernetes/": "a provider folder knows its own provider",
    "kube/api.py": "api_for reads the handed-over cluster's kubeconfig and context from its provider model",
    "spec/model.py": "the spec owns its discriminated union of providers (per-provider defaults, validation)",
    "catalog/images.py": "catalog data: each image manifest says which cloud it is for",
    "preflight/aws.py": _ONE_PROVIDER,
    "preflight/aws_tools.py": "a check registered for AWS only (the aws CLI, its SSM plugin)",
    "preflight/gcp.py": _ONE_PROVIDER,
    "preflight/azure.py": _ONE_PROVIDER,
    "preflight/local.py": _ONE_PROVIDER,
    "preflight/baremetal.py": _ONE_PROVIDER,
    "preflight/kubernetes.py": _ONE_PROVIDER,
    "preflight/common.py": "instance_type_known reads the catalog's section of the spec's provider: only on "
    "bare metal may a site name its own machines",
}


def provider_branches(path: Path) -> list[str]:
    """Comparisons with a provider kind (``kind == "aws"``, ``in ("local", "baremetal")``) and
    ``isinstance(..., AwsProvider)`` tests in one module, as ``line: code``."""
    found = []
    for node in ast.walk(source_tree.parse(path.read_text(encoding="utf-8"))):
        named = False
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                values = [side, *(side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [])]
                named |= any(isinstance(v, ast.Constant) and v.value in PROVIDER_KINDS for v in values)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            named = any(isinstance(n, ast.Name) and n.id in PROVIDER_MODELS for n in ast.walk(node))
        if named:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_guard_sees_provider_branches(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        'if spec.provider.kind == "local": pass\n'
        'ok = kind in ("aws", "gcp")\n'
        "local = isinstance(spec.provider, LocalProvider)\n"
        'fine = kind == "stat" and isinstance(x, int)\n'
    )
    assert [line.split(":")[0] for line in provider_branches(module)] == ["1", "2", "3"]


def test_only_the_backend_table_names_the_providers():
    """No provider if/elif outside the table, in the whole package: the CLI, lifecycle, inventory, the
    pipeline and the shared modules of infra ask the spec's backend (``MAY_NAME_PROVIDERS`` says where a
    provider may be named, and why)."""
    for allowed in MAY_NAME_PROVIDERS:
        assert (SRC / allowed).exists(), f"{allowed} is listed but gone: drop it from MAY_NAME_PROVIDERS"
    offenders = {
        relative: branches
        for path in sorted(SRC.rglob("*.py"))
        if not (relative := path.relative_to(SRC).as_posix()).startswith(tuple(MAY_NAME_PROVIDERS))
        and (branches := provider_branches(path))
    }
    assert not offenders, f"provider branches outside the backend table: {offenders}"
