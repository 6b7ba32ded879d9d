"""The Azure stack configs in stacks/ name an existing example spec and the spec's own subscription and
location; the entry point runs the program with the pinned expiry."""

from __future__ import annotations

import runpy
from pathlib import Path

import pulumi
import pytest
import yaml

from gpufleet.infra.azure.mocks import AzureMockCloud
from gpufleet.infra.plan import run_offline
from gpufleet.spec.load import load_spec

STACKS = Path(__file__).resolve().parents[3] / "stacks"
AZURE_STACKS = ["Pulumi.nd-h100-lustre.yaml"]


@pytest.mark.parametrize("name", AZURE_STACKS)
def test_stack_config_points_at_its_spec(name):
    config = yaml.safe_load((STACKS / name).read_text(encoding="utf-8"))["config"]
    spec = load_spec(STACKS / config["gpufleet:spec"])
    provider = spec.provider
    assert provider.kind == "azure", name
    assert (config["azure-native:subscriptionId"], config["azure-native:location"]) == (
        provider.subscription,
        provider.location,
    ), f"{name}: the azure-native:* keys differ from {config['gpufleet:spec']}"


def test_entry_point_runs_the_program_with_the_pinned_expiry():
    config = yaml.safe_load((STACKS / AZURE_STACKS[0]).read_text(encoding="utf-8"))["config"]
    config = {**config, "gpufleet:createdAt": "2026-11-27T09:00:00Z"}  # as stack-pin writes it
    spec = load_spec(STACKS / config["gpufleet:spec"])

    def program() -> None:
        pulumi.runtime.set_all_config({k: str(v) for k, v in config.items()})
        runpy.run_path(str(STACKS / "__main__.py"), run_name="__main__")

    plan = run_offline(program, AzureMockCloud(spec), stack="nd-h100-lustre")
    (group,) = plan.of_type("azure-native:resources:ResourceGroup")
    assert group.inputs["tags"]["gpufleet:expires-at"] == "2026-11-27T17:00:00Z", group.urn
    vms = plan.of_type("azure-native:compute:VirtualMachine")
    assert len(vms) == sum(g.count for g in spec.node_groups), [r.urn for r in vms]
    keys = {
        k["keyData"] for vm in vms for k in vm.inputs["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    }
    assert len(keys) == 1 and next(iter(keys)).startswith("ssh-ed25519 "), "the stack's own key on every VM"
