"""What every backend's ``down`` reports: what it removed, and what it found still there afterwards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Teardown:
    removed: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"removed": self.removed, "leftovers": self.leftovers}
