"""The GCP stack configs in stacks/ name an existing example spec and the spec's own project, region, zone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.spec.load import load_spec

STACKS = Path(__file__).resolve().parents[3] / "stacks"
GCP_STACKS = ["Pulumi.a3-mega-lustre.yaml", "Pulumi.a3-ultra-reservation.yaml"]


@pytest.mark.parametrize("name", GCP_STACKS)
def test_stack_config_points_at_its_spec(name):
    config = yaml.safe_load((STACKS / name).read_text(encoding="utf-8"))["config"]
    spec = load_spec(STACKS / config["gpufleet:spec"])
    provider = spec.provider
    assert provider.kind == "gcp", name
    assert (config["gcp:project"], config["gcp:region"], config["gcp:zone"]) == (
        provider.project,
        provider.region,
        provider.zone,
    ), f"{name}: the gcp:* keys differ from {config['gpufleet:spec']}"
