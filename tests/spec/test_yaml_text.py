"""Reading spec text: duplicate keys, YAML's own errors in words, aliases, nesting, units that overflow."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.errors import SpecError
from gpufleet.spec import yaml_text
from gpufleet.spec.units import MAX_BYTES, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", "key 'c' is given twice in the same block: line 3 and line 4"),
        ("a: [1, 2\nb: 3\n", "the '[' opened at line 1, column 4 is not closed with ']'"),
        ("a: {x: 1\nb: 3\n", "the '{' opened at line 1, column 4 is not closed with '}'"),
        ('a: "open\nb: 3\n', "the quote opened at line 1, column 4 is never closed"),
        ("a:\n\tb: 1\n", "a tab character; YAML indents with spaces only"),
        ("a: 1\n b: 2\n", "a 'key: value' where YAML expected none"),
        ("a:\n  - 1\n - 2\n", "line 3"),
        ("a: *nowhere\n", "the alias names no anchor"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("x: &x [1]\n" + "".join(f"k{i}: *x\n" for i in range(101)), "more than 100 uses of YAML aliases"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "nests blocks 32+ levels deep"),
        ("", "is empty"),
        ("# only\n   \n# comments\n", "is only comments"),
    ],
)
def test_parse_says_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(SpecError) as raised:
        yaml_text.parse(text, "spec.yaml")
    assert expected in str(raised.value)


def test_parse_quotes_the_line_with_a_caret() -> None:
    with pytest.raises(SpecError) as raised:
        yaml_text.parse("name: demo\nprovider:\n  kind: local\n   cpus: 1\n", "spec.yaml")
    assert "\n       cpus: 1\n" in raised.value.message and raised.value.message.endswith("^")


def test_same_key_in_different_blocks_is_fine() -> None:
    data, root = yaml_text.parse("a:\n  name: x\nb:\n  name: y\n", "spec.yaml")
    assert data == {"a": {"name": "x"}, "b": {"name": "y"}}
    assert yaml_text.scalar_text(root, ["b", "name"]) == "y"


def test_scalar_text_is_what_the_user_wrote() -> None:
    _, root = yaml_text.parse("software:\n  cuda: 12.10\ncount: yes\nl: [a, b]\n", "spec.yaml")
    assert yaml_text.scalar_text(root, ["software", "cuda"]) == "12.10"
    assert yaml_text.scalar_text(root, ["count"]) == "yes"
    assert yaml_text.scalar_text(root, ["l", 1]) == "b"
    assert yaml_text.scalar_text(root, ["l"]) is None and yaml_text.scalar_text(root, ["nope"]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("90m", timedelta(minutes=90)), ("1d12h", timedelta(hours=36)), (3600, timedelta(hours=1))],
)
def test_durations(value: object, expected: timedelta) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (10**30, "far too long"),
        ("99999999999d", "far too long"),
        (float("inf"), "far too long"),
        (float("nan"), "positive time"),
        (-5, "positive time"),
        (True, "expected a duration"),
    ],
)
def test_durations_that_overflow_or_make_no_sense(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "message"), [("99999999T", "too large"), (-1, "negative"), (False, "size")]
)
def test_sizes_that_overflow(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_bytes(value)
    assert parse_bytes("1P") == MAX_BYTES


def _sequence_bomb(levels: int = 9, width: int = 10) -> str:
    """Nine levels of ten aliases: 90 aliases (under MAX_ALIASES) standing for 10**9 values."""
    text = 'l0: &l0 "lol"\n'
    for i in range(1, levels + 1):
        text += f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]\n"
    return text


def _merge_bomb(levels: int = 30) -> str:
    """Merge keys that merge a mapping twice per level: 60 aliases, 2**30 key/value pairs once merged."""
    text = "m0: &m0 {a: 1, b: 2}\n"
    for i in range(1, levels + 1):
        text += f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}\n"
    return text


def _mapping_bomb(levels: int = 9) -> str:
    """The same expansion written as nested mappings inside an otherwise real spec field."""
    text = "name: demo\nprovider: local\ntags:\n  x0: &x0 {v: lol}\n"
    for i in range(1, levels + 1):
        entries = ", ".join(f"k{j}: *x{i - 1}" for j in range(10))
        text += f"  x{i}: &x{i} {{{entries}}}\n"
    return text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bomb", [_sequence_bomb, _merge_bomb, _mapping_bomb])
def test_alias_bombs_are_refused_naming_the_problem(bomb) -> None:
    """Each of these kept the depth walk (and then construction, validation) busy for minutes."""
    text = bomb()
    assert text.count("*") <= yaml_text.MAX_ALIASES, "the bomb stays under the alias-count limit"
    with pytest.raises(SpecError) as raised:
        yaml_text.parse(text, "spec.yaml")
    message = str(raised.value)
    assert "anchors and aliases (&name, *name)" in message, message
    assert f"expand to more than {yaml_text.MAX_NODES} values" in message, message
    assert "billion" in message, message


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [1, *a]}\n"])
def test_an_alias_inside_its_own_anchor_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="alias to itself"):
        yaml_text.parse(text, "spec.yaml")


def test_many_plain_values_without_aliases_are_refused_as_not_a_spec() -> None:
    text = "a: [" + ", ".join(["1"] * (yaml_text.MAX_NODES + 10)) + "]\n"
    with pytest.raises(SpecError, match=f"holds more than {yaml_text.MAX_NODES} values"):
        yaml_text.parse(text, "spec.yaml")


def test_a_few_shared_aliases_stay_fine() -> None:
    text = "base: &b {cpus: 1}\na: *b\nb: *b\nlist: [*b, *b, *b]\n"
    data, _ = yaml_text.parse(text, "spec.yaml")
    assert data["list"] == [{"cpus": 1}] * 3
