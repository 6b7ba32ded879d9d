"""The cloud-blind part of baked images: which hashes this machine's clusters record, and the rule."""

from __future__ import annotations

import pytest

from gpufleet.errors import SpecError
from gpufleet.infra.images import CloudImage, referenced_hashes, to_prune


def image(name: str, digest: str, created: str, base: str = "ubuntu-22.04", used_by: tuple[str, ...] = ()):
    return CloudImage(name, name, digest, base, created, used_by=used_by)


def test_a_damaged_inventory_stops_the_rule_instead_of_losing_its_image(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "inventory.yml").write_text("all: [unclosed\n", encoding="utf-8")
    (tmp_path / ".bake").mkdir()  # a builder's folder holds no cluster inventory
    with pytest.raises(SpecError, match="not valid YAML"):
        referenced_hashes(tmp_path)


def test_no_state_folder_references_nothing(tmp_path):
    assert referenced_hashes(tmp_path / "absent") == set()


def test_the_rule_is_per_base_image_and_newest_first():
    images = [
        image("a1", "a" * 64, "2026-11-01"),
        image("a2", "b" * 64, "2026-11-02"),
        image("a3", "c" * 64, "2026-11-03"),
        image("d1", "d" * 64, "2026-10-01", base="dlami-base-ubuntu-22.04"),
        image("a0", "e" * 64, "2026-10-01", used_by=("train",)),
    ]
    assert [i.id for i in to_prune(images, referenced=set())] == ["a1"]
    assert to_prune(images, referenced={"a" * 64}) == []
    assert [i.id for i in to_prune(images, referenced=set(), keep=1)] == ["a2", "a1"]
