"""The zone data of Google Cloud services (gcp_zones.yaml): it loads, every row is a whole region with a
sourced page, and a zone is judged offered, not offered, or not covered, never guessed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpufleet.catalog.gcp_zones import ZoneTable, judge_zone, load_gcp_zones

ZONES = load_gcp_zones()
TABLES = {"managed_lustre": ZONES.managed_lustre, "roce_network_profile": ZONES.roce_network_profile}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_table_names_a_google_page_and_a_date(name):
    source = TABLES[name].source
    assert source.url.startswith("https://cloud.google.com/"), f"{name}: {source.url}"
    assert source.retrieved >= "2026-11-01", f"{name}: read {source.retrieved}"


def test_managed_lustre_rows_read_from_the_page():
    """Rows as Google's page prints them (a spot check of rows with gaps, which a guess would fill)."""
    regions = ZONES.managed_lustre.regions
    assert regions["asia-east1"] == ["asia-east1-a", "asia-east1-c"]
    assert regions["asia-northeast1"] == ["asia-northeast1-b", "asia-northeast1-c"]
    assert regions["europe-central2"] == ["europe-central2-a", "europe-central2-c"]
    assert ZONES.managed_lustre.complete is False, "only part of the table was read"


@pytest.mark.parametrize(
    ("zone", "offered", "alternatives"),
    [
        ("asia-east1-a", True, ("asia-east1-a", "asia-east1-c")),
        ("asia-east1-b", False, ("asia-east1-a", "asia-east1-c")),
        ("us-central1-b", None, None),  # region not read: not judged
        ("us-central1-a", True, ("us-central1-a",)),  # no row, but Google's own daily test runs there
    ],
)
def test_judge_managed_lustre_zone(zone, offered, alternatives):
    verdict = judge_zone(ZONES.managed_lustre, zone)
    assert verdict.offered is offered, verdict
    if alternatives is not None:
        assert verdict.alternatives == alternatives


def test_a_complete_table_refuses_a_region_it_does_not_list():
    table = ZoneTable.model_validate(
        {
            "source": {"title": "t", "url": "https://cloud.google.com/x", "retrieved": "2026-11-23"},
            "complete": True,
            "regions": {"europe-west4": ["europe-west4-a", "europe-west4-b"]},
        }
    )
    verdict = judge_zone(table, "us-central1-a")
    assert verdict.offered is False and verdict.alternatives == ("europe-west4-a", "europe-west4-b")


def test_a_row_with_another_regions_zone_is_refused():
    with pytest.raises(ValidationError, match="do not belong to the region"):
        ZoneTable.model_validate(
            {
                "source": {"title": "t", "url": "https://cloud.google.com/x", "retrieved": "2026-11-23"},
                "complete": False,
                "regions": {"asia-east1": ["asia-east2-a"]},
            }
        )


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_zone_seen_elsewhere_names_a_google_source(name):
    for seen in TABLES[name].seen:
        assert seen.source.url.startswith("https://github.com/GoogleCloudPlatform/"), seen
        assert seen.source.retrieved >= "2026-11-01", seen


def test_a_zone_seen_elsewhere_cannot_override_a_row_read_from_the_page():
    with pytest.raises(ValidationError, match="its region has a row from the page"):
        ZoneTable.model_validate(
            {
                "source": {"title": "t", "url": "https://cloud.google.com/x", "retrieved": "2026-11-23"},
                "complete": False,
                "regions": {"asia-east1": ["asia-east1-a", "asia-east1-c"]},
                "seen": [
                    {
                        "zone": "asia-east1-b",
                        "source": {"title": "t", "url": "https://github.com/x/y", "retrieved": "2026-11-24"},
                    }
                ],
            }
        )
