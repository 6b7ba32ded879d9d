"""Where Google Cloud offers the zonal services gpufleet creates (Managed Lustre, the RoCE network
profile), from ``gcp_zones.yaml``: Google's pages as read on a date, row by row.

Pure data and a lookup: no cloud SDK, no network. ``gpufleet.preflight.gcp`` judges the spec's zone with
it. Creates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, model_validator

from gpufleet.catalog.model import Source


class ZoneTable(BaseModel):
    """One service's zones, region by region, as its page lists them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source
    complete: bool
    regions: dict[str, list[str]]

    @model_validator(mode="after")
    def _zones_in_their_region(self) -> ZoneTable:
        for region, zones in self.regions.items():
            strays = [z for z in zones if not z.startswith(region + "-")]
            if strays or not zones:
                raise ValueError(f"{region}: zones {strays or zones} do not belong to the region")
        return self


class GcpZones(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    managed_lustre: ZoneTable
    roce_network_profile: ZoneTable


@dataclass(frozen=True)
class ZoneVerdict:
    """``offered`` is None when the data does not cover the zone's region (not read, so not judged)."""

    offered: bool | None
    alternatives: tuple[str, ...]  # the zones that work: in the region, else every zone listed


def judge_zone(table: ZoneTable, zone: str) -> ZoneVerdict:
    region = zone.rsplit("-", 1)[0]
    if region in table.regions:
        zones = table.regions[region]
        return ZoneVerdict(zone in zones, tuple(zones))
    every = tuple(z for zones in table.regions.values() for z in zones)
    return ZoneVerdict(False if table.complete else None, every)


@cache
def load_gcp_zones() -> GcpZones:
    text = resources.files("gpufleet.catalog").joinpath("gcp_zones.yaml").read_text(encoding="utf-8")
    return GcpZones.model_validate(yaml.safe_load(text))
