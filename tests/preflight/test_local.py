"""Preflight checks of the local backend: the cluster must fit this machine."""

from __future__ import annotations

import os

import yaml

from gpufleet.preflight import Severity, run_checks
from gpufleet.spec import parse_spec


def local(count: int = 2, cpus: int = 1, memory: int = 1024):
    return parse_spec(
        yaml.safe_dump(
            {
                "name": "t",
                "provider": {"kind": "local", "node_cpus": cpus, "node_memory_mb": memory},
                "node_groups": [
                    {"name": "head", "roles": ["controller"], "instance_type": "local"},
                    {"name": "cpu", "roles": ["compute"], "instance_type": "local", "count": count},
                ],
                "validation": {
                    "max_bytes": "16M",
                    "gate_min_bytes": "4M",
                    "min_busbw": {"all_reduce": 0.01, "all_gather": 0.01},
                },
            }
        )
    )


def errors_of(spec):
    return [f for f in run_checks(spec) if f.level is Severity.ERROR]


def test_default_local_cluster_fits() -> None:
    assert errors_of(local()) == []


def test_too_many_nodes() -> None:
    found = errors_of(local(count=20))
    assert found and "at most 16 containers" in found[0].message


def test_more_cpus_than_the_host() -> None:
    found = errors_of(local(cpus=(os.cpu_count() or 1) + 1))
    assert found and found[0].path == "provider.node_cpus"


def test_more_memory_than_the_host() -> None:
    found = errors_of(local(memory=65536))
    assert any(f.path == "provider.node_memory_mb" for f in found) or os.sysconf(
        "SC_PHYS_PAGES"
    ) * os.sysconf("SC_PAGE_SIZE") >= 2 * 65536 * (1 << 20)
