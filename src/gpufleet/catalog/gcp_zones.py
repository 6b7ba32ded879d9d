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


class SeenZone(BaseModel):
    """One zone a Google source shows the service working in, where the page's row for its region could
    not be read: positive evidence only (the region's other zones stay unjudged)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zone: str
    source: Source


class ZoneTable(BaseModel):
    """One service's zones, region by region, as its page lists them, plus single zones seen elsewhere."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source
    complete: bool
    regions: dict[str, list[str]]
    seen: list[SeenZone] = []

    @model_validator(mode="after")
    def _zones_in_their_region(self) -> ZoneTable:
        for region, zones in self.regions.items():
            strays = [z for z in zones if not z.startswith(region + "-")]
            if strays or not zones:
                raise ValueError(f"{region}: zones {strays or zones} do not belong to the region")
        for seen in self.seen:
            if region_of(seen.zone) in self.regions:
                # The page's row decides there; a zone seen elsewhere would contradict or repeat it.
                raise ValueError(f"{seen.zone}: its region has a row from the page; drop it from 'seen'")
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


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def judge_zone(table: ZoneTable, zone: str) -> ZoneVerdict:
    region = region_of(zone)
    if region in table.regions:
        zones = table.regions[region]
        return ZoneVerdict(zone in zones, tuple(zones))
    if any(seen.zone == zone for seen in table.seen):
        return ZoneVerdict(True, (zone,))
    every = tuple(z for zones in table.regions.values() for z in zones)
    return ZoneVerdict(False if table.complete else None, every)


@cache
def load_gcp_zones() -> GcpZones:
    text = resources.files("gpufleet.catalog").joinpath("gcp_zones.yaml").read_text(encoding="utf-8")
    return GcpZones.model_validate(yaml.safe_load(text))
