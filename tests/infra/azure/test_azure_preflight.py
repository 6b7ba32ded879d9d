"""Azure preflight checks: (spec change, expected finding) tables, run offline on the catalog, and
``gpufleet check`` refusing each error case with the field and the fix (exit 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from azure_testlib import ARM_IMAGE, SUBSCRIPTION, azure_gpu_types, azure_spec
from typer.testing import CliRunner

from gpufleet.catalog import load_catalog
from gpufleet.cli.app import app
from gpufleet.preflight import Severity, run_checks

runner = CliRunner()
PROVIDER: dict[str, Any] = {"kind": "azure", "subscription": SUBSCRIPTION, "location": "eastus"}
GB200 = "Standard_ND128isr_NDR_GB200_v6"


def findings(spec, level: Severity = Severity.INFO, catalog=None) -> list[str]:
    return [
        f"{f.level.value}:{f.check}:{f.path}:{f.message}" for f in run_checks(spec, catalog, min_level=level)
    ]


def groups(size: str, count: int) -> list[dict[str, Any]]:
    return [
        {"name": "head", "roles": ["controller"], "instance_type": "Standard_D8s_v5"},
        {"name": "gpu", "roles": ["compute"], "instance_type": size, "count": count},
    ]


@pytest.mark.parametrize("item", azure_gpu_types(), ids=lambda item: item.name)
def test_every_azure_gpu_size_passes_with_its_own_fabric_and_image(item):
    assert findings(azure_spec(item.name), Severity.ERROR) == []


CASES = [
    # (spec changes, level, check, path, words of the message)
    (
        {"node_groups": groups("Standard_ND96isr_H100_v5", 101)},
        "error",
        "azure_ib_domain",
        "node_groups[1].count",
        ["101 VMs", "at most 100", "Split it into 2 groups", "provider.ib_domain_max_vms"],
    ),
    (
        {
            "node_groups": groups("Standard_ND96isr_H100_v5", 101),
            "provider": {**PROVIDER, "ib_domain_max_vms": 200},
        },
        None,
        "azure_ib_domain",
        "",
        [],
    ),
    (
        {"node_groups": groups(GB200, 18), "provider": PROVIDER},
        "error",
        "azure_image",
        "provider.image",
        ["arm64", "no Ubuntu HPC image URN", "provider.image.id", "Arm64"],
    ),
    (
        {"provider": {**PROVIDER, "image": {"urn": "Canonical:ubuntu-24_04-lts:server-arm64:latest"}}},
        "error",
        "azure_image",
        "provider.image",
        ["built for Arm64", "x86_64", "built for x64"],
    ),
    (
        {
            "provider": {
                **PROVIDER,
                "image": {
                    "urn": "contoso:hpc-gen1:2204:latest",
                    "generation": "V1",
                    "architecture": "x64",
                    "os_release": "ubuntu-22.04",
                },
            }
        },
        "error",
        "azure_image",
        "provider.image.generation",
        ["Generation 2"],
    ),
    (
        {
            "provider": {
                **PROVIDER,
                "image": {"id": ARM_IMAGE.replace("arm64", "x64"), "os_release": "ubuntu-22.04"},
            }
        },
        "error",
        "azure_image",
        "provider.image.architecture",
        ["set provider.image.architecture (x64"],
    ),
    (
        {"provider": {**PROVIDER, "image": {"id": ARM_IMAGE.replace("arm64", "x64"), "architecture": "x64"}}},
        "error",
        "azure_image",
        "provider.image.os_release",
        ["Ubuntu release", "ubuntu-22.04 or ubuntu-24.04"],
    ),
    (
        {
            "node_groups": groups(GB200, 20),
            "provider": {
                **PROVIDER,
                "image": {"id": ARM_IMAGE, "architecture": "Arm64", "os_release": "ubuntu-24.04"},
            },
        },
        "warning",
        "azure_nvlink_domain",
        "node_groups[1].count",
        ["NVLink domain of 18 VMs", "72 GPUs", "use 18 or 36"],
    ),
    (
        {"filesystem": {"kind": "azure_lustre", "sku": "AMLFS-Durable-Premium-125", "size_tib": 20}},
        "error",
        "azure_lustre_size",
        "filesystem.size_tib",
        ["steps of 16 TiB from 16 TiB", "use 32"],
    ),
    (
        {"filesystem": {"kind": "azure_lustre", "sku": "AMLFS-Durable-Premium-500", "size_tib": 200}},
        "warning",
        "azure_lustre_size",
        "filesystem.size_tib",
        ["goes to 128 TiB without a support ticket"],
    ),
    (
        {},
        "info",
        "azure_vcpu_quota",
        "provider.location",
        ["192 vCPUs of quota family standardNDSH100v5Family in eastus", "az vm list-usage"],
    ),
    (
        {
            "node_groups": groups(GB200, 18),
            "provider": {
                **PROVIDER,
                "image": {"id": ARM_IMAGE, "architecture": "Arm64", "os_release": "ubuntu-24.04"},
            },
        },
        "warning",
        "azure_vcpu_quota",
        "provider.location",
        ["Standard_ND128isr_NDR_GB200_v6 needs 2304 vCPUs", "quota family gpufleet's catalog does not name"],
    ),
    (
        {
            "node_groups": [
                *groups("Standard_ND96isr_H100_v5", 2),
                {"name": "gpu2", "roles": ["compute"], "instance_type": "Standard_ND96isr_H100_v5"},
            ]
        },
        "warning",
        "azure_ib_domain",
        "node_groups[2]",
        ["separate InfiniBand domains", "Put the nodes of one job in one group"],
    ),
]


@pytest.mark.parametrize(("changes", "level", "check", "path", "words"), CASES)
def test_azure_checks(changes, level, check, path, words):
    found = [f for f in findings(azure_spec(**changes)) if f.split(":")[1] == check]
    if level is None:
        assert not [f for f in found if f.startswith(("error", "warning"))], found
        return
    matching = [f for f in found if f.startswith(f"{level}:{check}:{path}:") and all(w in f for w in words)]
    assert matching, found


def test_a_region_the_catalog_does_not_list_is_refused_where_it_lists_regions():
    catalog = load_catalog()
    item = catalog.instance_types["Standard_ND96isr_H100_v5"]
    listed = catalog.model_copy(
        update={
            "instance_types": {
                **catalog.instance_types,
                item.name: item.model_copy(update={"regions": ["eastus"]}),
            }
        }
    )
    spec = azure_spec(provider={**PROVIDER, "location": "westus"})
    errors = [f for f in findings(spec, Severity.ERROR, listed) if ":azure_sku_region:" in f]
    assert errors and "offered in eastus (the catalog's sources), not westus" in errors[0], errors
    assert not [f for f in findings(azure_spec(), Severity.ERROR, listed) if ":azure_sku_region:" in f]
    told = [f for f in findings(spec) if ":azure_sku_region:" in f]
    assert told and told[0].startswith("info:") and "az vm list-skus --location westus" in told[0], told


@pytest.mark.parametrize(
    ("changes", "field", "fix"),
    [
        (
            {"node_groups": groups("Standard_ND96isr_H100_v5", 150)},
            "node_groups[1].count",
            "Split it into 2 groups",
        ),
        ({"node_groups": groups(GB200, 18)}, "provider.image", "set provider.image.id"),
        (
            {"filesystem": {"kind": "azure_lustre", "sku": "AMLFS-Durable-Premium-250", "size_tib": 10}},
            "filesystem.size_tib",
            "use 16",
        ),
    ],
)
def test_check_refuses_with_the_field_and_the_fix(tmp_path: Path, changes, field, fix):
    data = azure_spec().model_dump(mode="json", exclude_defaults=True)
    data.update(changes)
    data["provider"] = {**PROVIDER, **{k: v for k, v in data.get("provider", {}).items() if k != "kind"}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = runner.invoke(app, ["check", str(path), "--json"])
    assert result.exit_code == 1, result.output
    assert field in result.output and fix in " ".join(result.output.split()), result.output
