"""What a teardown's leftover check reports: one resource still there for the cluster, on any cloud."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Leftover:
    kind: str  # AWS: e.g. "ec2:instance"; GCP: the Cloud Asset type, e.g. compute.googleapis.com/Instance
    id: str  # AWS: the resource id; GCP: the full resource name (//compute.googleapis.com/projects/...)
    detail: str = ""  # state, location

    def __str__(self) -> str:
        return f"{self.kind} {self.id}" + (f" ({self.detail})" if self.detail else "")

    @property
    def short_name(self) -> str:
        return self.id.rsplit("/", 1)[-1]
