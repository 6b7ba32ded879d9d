"""NCCL settings that are no-ops or harmful on a fabric: the table, and the lint over an environment.

Each rule names the variable, the fabrics it applies to, when it fires, what it does there and its public
source. ``gpufleet check`` lints the NCCL environment a cluster's nodes get: the fabric role's own
settings and the inventory's override (``gpufleet_nccl_env``), so a hand-written setting that would turn
the EFA tuner off or force TCP is said before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.spec.model import FabricKind

AWSOME_GB200 = (
    "awslabs/awsome-distributed-ai@8dd050d:micro-benchmarks/nccl-tests/README-gb200.md (read 2026-11-27)"
)
NCCL_ENV_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html (read 2026-11-27)"
SKYPILOT_10055 = "https://github.com/skypilot-org/skypilot/issues/10055 (2026-07)"

_RDMA = frozenset({FabricKind.EFA, FabricKind.INFINIBAND, FabricKind.ROCE, FabricKind.TCPX, FabricKind.TCPXO})


def _any(_value: str) -> bool:
    return True


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class LintRule:
    variable: str
    fabrics: frozenset[FabricKind]
    effect: str  # "no-op" or "harmful"
    why: str
    source: str
    fires: Callable[[str], bool] = _any
    when: str = "set"

    def to_json(self) -> dict[str, object]:
        return {
            "variable": self.variable,
            "fabrics": sorted(kind.value for kind in self.fabrics),
            "when": self.when,
            "effect": self.effect,
            "why": self.why,
            "source": self.source,
        }


RULES: tuple[LintRule, ...] = (
    LintRule(
        "NCCL_PROTO",
        frozenset({FabricKind.EFA}),
        "harmful",
        "aws-ofi-nccl ships a tuner that picks protocol and algorithm per message size for EFA; setting "
        "NCCL_PROTO by hand turns that tuner off",
        AWSOME_GB200,
    ),
    LintRule(
        "NCCL_ALGO",
        frozenset({FabricKind.EFA}),
        "harmful",
        "aws-ofi-nccl ships a tuner that picks protocol and algorithm per message size for EFA; setting "
        "NCCL_ALGO by hand turns that tuner off",
        AWSOME_GB200,
    ),
    LintRule(
        "NCCL_COLLNET_ENABLE",
        frozenset({FabricKind.EFA}),
        "no-op",
        "EFA has no in-network reduction: aws-ofi-nccl exports no CollNet symbol, so "
        "NCCL_COLLNET_ENABLE is a silent no-op",
        AWSOME_GB200,
        _truthy,
        "enabled",
    ),
    LintRule(
        "NCCL_IB_DISABLE",
        frozenset({FabricKind.INFINIBAND, FabricKind.ROCE}),
        "harmful",
        "disables NCCL's IB verbs transport: on InfiniBand or RoCE NCCL falls back to TCP sockets",
        NCCL_ENV_DOC,
        _truthy,
        "enabled",
    ),
    LintRule(
        "NCCL_NET",
        _RDMA,
        "harmful",
        "NCCL_NET=Socket forces TCP sockets on a fabric that has a faster transport: the silent fallback to "
        "TCP users report",
        f"{NCCL_ENV_DOC}; {SKYPILOT_10055}",
        lambda value: value.strip().lower() == "socket",
        "Socket",
    ),
    LintRule(
        "FI_PROVIDER",
        frozenset({FabricKind.EFA}),
        "harmful",
        "libfabric then loads another provider (tcp, sockets) instead of EFA: NCCL runs, over TCP",
        "https://github.com/aws/aws-ofi-nccl (FI_PROVIDER=efa; read 2026-11-27)",
        lambda value: value.strip().lower() not in ("efa", ""),
        "not efa",
    ),
    LintRule(
        "NCCL_PROTO",
        frozenset({FabricKind.INFINIBAND, FabricKind.ROCE, FabricKind.ETHERNET}),
        "harmful",
        "NCCL's docs discourage setting NCCL_PROTO except to work around a suspected NCCL bug: it overrides "
        "NCCL's own tuning",
        NCCL_ENV_DOC,
    ),
)


@dataclass(frozen=True)
class LintFinding:
    variable: str
    value: str
    where: str  # the file or field that sets it
    rule: LintRule

    @property
    def message(self) -> str:
        return (
            f"{self.variable}={self.value} ({self.where}) is {self.rule.effect} on this fabric: "
            f"{self.rule.why}; source: {self.rule.source}. Remove it unless you measured that it helps"
        )


def lint(fabric: FabricKind, env: Mapping[str, object], where: str) -> list[LintFinding]:
    """The settings of ``env`` that a rule of ``RULES`` flags on ``fabric``."""
    found = []
    for variable, raw in env.items():
        value = "" if raw is None else str(raw)
        for rule in RULES:
            if rule.variable == variable and fabric in rule.fabrics and rule.fires(value):
                found.append(LintFinding(variable, value, where, rule))
    return found
