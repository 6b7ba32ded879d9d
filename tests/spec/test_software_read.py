"""Every pin in the spec's software block is read by a role (through the inventory's gpufleet_software), or
refused until one is: a pin no role reads would be accepted and silently not installed (issue 30 step 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpufleet.errors import SpecError
from gpufleet.spec import parse_spec
from gpufleet.spec.model import Software

ROOT = Path(__file__).resolve().parents[2]
# Pins no role reads yet, each refused unless it has its default.
REFUSED = {"openmpi": "4.1.4"}


def _read_by_the_roles() -> set[str]:
    text = "\n".join(
        path.read_text(encoding="utf-8")
        for folder in ("roles", "playbooks")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".yml", ".yaml", ".j2"}
    )
    return set(re.findall(r"gpufleet_software(?:\s*\|\s*default\(\{\}\)\s*\))?(?:\.|\[')([a-z_]+)", text))


def test_every_software_pin_is_read_by_a_role_or_refused() -> None:
    read = _read_by_the_roles()
    assert not set(REFUSED) & read, f"a role reads {set(REFUSED) & read}: take it out of REFUSED"
    assert set(Software.model_fields) - read == set(REFUSED)


@pytest.mark.parametrize(("field", "value"), sorted(REFUSED.items()))
def test_a_pin_no_role_reads_is_refused_naming_the_field(field: str, value: str) -> None:
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text(encoding="utf-8"))
    data.setdefault("software", {})[field] = value
    with pytest.raises(SpecError, match=rf"(?s)software\.{field}\b.*no role installs .*{re.escape(value)}"):
        parse_spec(yaml.safe_dump(data))
    parse_spec(yaml.safe_dump({**data, "software": {**data["software"], field: "distro"}}))
