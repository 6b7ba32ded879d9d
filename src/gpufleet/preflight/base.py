"""Preflight findings and the registry of checks.

A check is a function ``(spec, catalog) -> Iterable[Finding]`` registered with ``@check(name, providers)``.
Checks run offline from the spec and the catalog only; each finding has a level, the check's name, the
dotted spec path it is about, and a message that says what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from gpufleet.catalog import Catalog, load_catalog
from gpufleet.errors import SpecError
from gpufleet.severity import FINDING_LEVELS, Severity
from gpufleet.spec.model import ClusterSpec


@dataclass(frozen=True)
class Finding:
    level: Severity
    check: str
    path: str
    message: str

    def to_json(self) -> dict[str, str]:
        data = asdict(self)
        data["level"] = self.level.value
        return data


CheckFn = Callable[[ClusterSpec, Catalog], Iterable[Finding]]


@dataclass(frozen=True)
class RegisteredCheck:
    name: str
    providers: frozenset[str]
    fn: CheckFn


_REGISTRY: list[RegisteredCheck] = []


def check(
    name: str, providers: Iterable[str] = ("local", "aws", "gcp", "azure", "baremetal")
) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        _REGISTRY.append(RegisteredCheck(name, frozenset(providers), fn))
        return fn

    return register


def registered_checks() -> list[RegisteredCheck]:
    _load_check_modules()
    return list(_REGISTRY)


def run_checks(
    spec: ClusterSpec, catalog: Catalog | None = None, *, min_level: Severity = Severity.INFO
) -> list[Finding]:
    """Every finding at or above ``min_level``, errors first."""
    catalog = catalog or load_catalog()
    findings: list[Finding] = []
    for registered in registered_checks():
        if spec.provider.kind in registered.providers:
            findings.extend(registered.fn(spec, catalog))
    strays = [f for f in findings if f.level not in FINDING_LEVELS]
    if strays:
        raise ValueError(f"a preflight finding is error, warning or info, not {strays[0].level}: {strays[0]}")
    kept = [f for f in findings if f.level.rank >= min_level.rank]
    return sorted(kept, key=lambda f: -f.level.rank)


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level is Severity.ERROR]


def require_no_errors(spec: ClusterSpec, catalog: Catalog | None = None) -> None:
    """Raise ``SpecError`` listing every error-level finding; nothing may be created before this passes."""
    found = run_checks(spec, catalog, min_level=Severity.ERROR)
    if found:
        lines = "\n".join(f"  - {f.path}: {f.message} [{f.check}]" for f in found)
        raise SpecError(
            f"cluster '{spec.name}' fails {len(found)} preflight check(s); nothing was created:\n{lines}",
            hint="fix the spec, then run 'gpufleet check SPEC' to see every finding",
        )


def _load_check_modules() -> None:
    # Imported for their @check registrations. Cloud modules import no cloud SDK.
    from gpufleet.preflight import (  # noqa: F401
        aws,
        azure,
        baremetal,
        checkpoint,
        common,
        gcp,
        head_size,
        kubernetes,
        local,
        names,
        nccl_env,
    )
