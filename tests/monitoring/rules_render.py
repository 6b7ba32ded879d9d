"""Render the monitoring role's rules template as the role would (Jinja, the role's defaults), for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"


def role_defaults() -> dict[str, Any]:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))


def render_rules(**overrides: Any) -> str:
    """The rules file with the role's defaults for the rule variables, overridden by ``overrides``."""
    defaults = role_defaults()
    variables = {
        "monitoring_alert_for": defaults["monitoring_alert_for"],
        "monitoring_rules_window": defaults["monitoring_rules_window"],
        "monitoring_thresholds": defaults["monitoring_thresholds"],
        **overrides,
    }
    template = (ROLE / "templates" / "gpufleet-rules.yml.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(template).render(**variables)
