"""The stack outputs are one typed model both ends use: each cloud's plan exports it, the inventory
reads it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpufleet.infra.outputs import OUTPUT_KEYS
from gpufleet.infra.program import plan_spec
from gpufleet.inventory.model import Host
from gpufleet.inventory.stack import StackOutputs, from_stack_outputs
from gpufleet.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
CREATED = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize("example", ["aws-p5.yaml", "gcp-a3-mega.yaml"])
def test_each_clouds_outputs_validate_against_the_one_model(example):
    spec = load_spec(ROOT / "examples" / example)
    outputs = plan_spec(spec, CREATED).outputs
    assert tuple(outputs) == OUTPUT_KEYS or set(outputs) == set(OUTPUT_KEYS), sorted(outputs)
    stack = StackOutputs.model_validate(outputs)
    assert (
        stack.expires_at == "2026-11-22T21:00:00Z"
        if example == "aws-p5.yaml"
        else stack.expires_at.endswith("Z")
    )
    inventory = from_stack_outputs(stack)
    assert [h.name for h in inventory.hosts] == [h.name for h in stack.hosts]
    assert all(h.address == h.private_ip for h in inventory.hosts)


def test_a_host_of_the_outputs_is_an_inventory_host():
    assert set(Host.model_fields) == set(
        StackOutputs.model_fields["hosts"].annotation.__args__[0].model_fields
    )


def test_outputs_that_lack_a_slurm_field_are_refused():
    outputs = {
        "cluster": "c",
        "provider": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "fabric": "efa",
        "expires_at": "2026-11-22T21:00:00Z",
        "head_node": "c-head",
        "hosts": [
            {"name": "c-head", "roles": ["controller"], "private_ip": "10.0.0.4", "instance_type": "m7i"}
        ],
    }
    with pytest.raises(ValidationError, match="cpus"):
        from_stack_outputs(outputs)
