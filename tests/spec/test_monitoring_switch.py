"""software.monitoring: the switch of the monitoring stack, and how it reaches the roles and teardown."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from factories import make_host, make_inventory
from gpufleet.errors import SpecError
from gpufleet.infra.software import with_software
from gpufleet.inventory.model import Inventory, Role
from gpufleet.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, software: dict[str, object] | None) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    if software is not None:
        data["software"] = {**(data.get("software") or {}), **software}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _inventory() -> Inventory:
    return make_inventory([make_host("c0", (Role.CONTROLLER, Role.COMPUTE), ip="10.0.0.2")])


@pytest.mark.parametrize(
    ("software", "expected"), [(None, True), ({"monitoring": True}, True), ({"monitoring": False}, False)]
)
def test_switch_reaches_the_roles_as_gpufleet_software(
    tmp_path: Path, software: dict[str, object] | None, expected: bool
) -> None:
    spec = load_spec(_spec(tmp_path, software))
    assert spec.software.monitoring is expected
    all_vars = with_software(_inventory(), spec).to_ansible()["all"]["vars"]
    assert all_vars["gpufleet_software"]["monitoring"] is expected


def test_a_non_boolean_is_refused_with_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"software\.monitoring"):
        load_spec(_spec(tmp_path, {"monitoring": "sometimes"}))
