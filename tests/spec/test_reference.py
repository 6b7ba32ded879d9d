"""docs/spec.md carries the field reference generated from the model, and it is current."""

from __future__ import annotations

from pathlib import Path

from gpufleet.spec.model import ClusterSpec
from gpufleet.spec.reference import BEGIN, END, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_docs_hold_the_current_reference() -> None:
    text = DOC.read_text()
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:stop] == render(), "docs/spec.md is stale: python -m gpufleet.spec.reference"


def test_every_top_level_field_is_documented() -> None:
    reference = render()
    for name in ClusterSpec.model_fields:
        assert f"| `{name}` |" in reference, name
