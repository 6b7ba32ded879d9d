"""Read a spec from YAML and turn pydantic's errors into one readable block.

Each problem names the dotted field path, the line in the file, the bad value and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpufleet.errors import SpecError
from gpufleet.spec import yaml_text
from gpufleet.spec.model import PATTERN_HELP, ClusterSpec

_DISCRIMINATED = {"provider", "filesystem"}


def load_spec(path: str | Path) -> ClusterSpec:
    """Load and validate a spec file. Raises ``SpecError`` with every problem listed."""
    path = Path(path)
    return parse_spec(yaml_text.read_text(path), source=str(path), base_dir=path.parent)


def parse_spec(text: str, *, source: str = "<spec>", base_dir: Path | None = None) -> ClusterSpec:
    """Validate spec text. Relative paths in the spec (a bare-metal inventory) are read from ``base_dir``."""
    data, root = yaml_text.parse(text, source)
    if not isinstance(data, dict):
        raise SpecError(
            f"{source} must hold a mapping of spec keys (name, provider, node_groups, ...), "
            f"not {_kind_of(data)}",
            hint="see examples/local.yaml for the shape",
        )
    context = {"base_dir": base_dir} if base_dir is not None else None
    try:
        return ClusterSpec.model_validate(data, context=context)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, data, root, source)) from None


def _kind_of(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return f"the plain text {_show(data)}"
    return f"the value {_show(data)}"


def format_validation_error(
    exc: ValidationError, data: Mapping[str, Any], root: yaml.Node | None, source: str
) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        path, value_present = _readable_path(error["loc"], data)
        at = (error.get("ctx") or {}).get("at")
        if at:  # a model validator that knows which field is at fault says so
            path = [*path, *(int(p) if p.isdigit() else p for p in str(at).split("."))]
            value_present = False
        line = _line_of(root, path)
        where = ".".join(_segment(p) for p in path).replace(".[", "[") or "(top level)"
        head = f"  - {where}" + (f" (line {line})" if line else "")
        message = _message(error)
        written = yaml_text.scalar_text(root, path)
        message = _yaml_typing(error, written) or message
        scalar = not isinstance(error["input"], Mapping | list)
        if value_present and scalar and error["type"] not in ("missing", "unknown_key"):
            shown = written if written is not None and written != str(error["input"]) else None
            head += f": got {_show(error['input'])}" + (f" (written {shown})" if shown else "")
        problems.append(f"{head}\n      {message}")
    count = len(problems)
    noun = "problem" if count == 1 else "problems"
    return f"spec {source} is not valid ({count} {noun}):\n" + "\n".join(problems)


def _segment(part: str | int) -> str:
    return f"[{part}]" if isinstance(part, int) else str(part)


def _readable_path(loc: Sequence[str | int], data: Any) -> tuple[list[str | int], bool]:
    """Drop the tags pydantic adds for discriminated unions and ``function-after`` wrappers."""
    path: list[str | int] = []
    node = data
    present = True
    tag_skipped = False
    for part in loc:
        if isinstance(node, Mapping):
            if part in node:
                path.append(part)
                node = node[part]
                continue
            tag_here = bool(path) and path[-1] in _DISCRIMINATED and "kind" not in node and not tag_skipped
            if isinstance(part, str) and (node.get("kind") == part or tag_here):
                # the discriminator value pydantic inserts into the location (once, right after the
                # field): a missing field inside the block keeps its own name (provider.region)
                tag_skipped = True
                continue
            if isinstance(node, Mapping) and isinstance(part, str) and part in ("function-after",):
                continue
            path.append(part)
            present = False
            node = None
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, str) and path and path[-1] in _DISCRIMINATED:
            continue  # shorthand such as ``provider: local``
        else:
            if not (isinstance(part, str) and part.startswith("function-")):
                path.append(part)
            present = present and node is not None
    return path, present


def _line_of(root: yaml.Node | None, path: Sequence[str | int]) -> int | None:
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if match is None:
                break
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
    return node.start_mark.line + 1 if node is not None and node is not root else None


def _message(error: Mapping[str, Any]) -> str:
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if error["type"] == "missing":
        return "this field is required"
    if error["type"] == "union_tag_invalid":
        expected = error.get("ctx", {}).get("expected_tags", "")
        return f"unknown kind; accepted: {expected}"
    if error["type"] == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return PATTERN_HELP.get(pattern, message)
    if error["type"] == "union_tag_not_found":
        return "say which kind with 'kind:' (e.g. kind: local)"
    return message


def _yaml_typing(error: Mapping[str, Any], written: str | None) -> str | None:
    """Say so when YAML's typing of what the user wrote is the problem (``yes`` a boolean, ``12.10`` a
    number), and how to write it instead."""
    value = error["input"]
    kind = str(error["type"])
    if kind == "bool_for_number" or (isinstance(value, bool) and kind != "bool_type"):
        text = written or str(value).lower()
        kind = "float_type" if kind == "bool_for_number" else kind
        return (
            f"YAML reads {text} as a boolean (yes/no/on/off/true/false all are); this field takes "
            f'{_wanted(kind)}: write the value itself (or quote it, "{text}", if you mean the word)'
        )
    if isinstance(value, int | float) and kind in ("string_type", "string_pattern_mismatch"):
        text = written if written is not None else str(value)
        changed = f" the number {value}" if text != str(value) else " a number"
        return f'YAML reads {text} as{changed}; this field takes text: quote it, "{text}"'
    return None


def _wanted(kind: str) -> str:
    if kind.startswith("int"):
        return "a whole number"
    if kind.startswith("float"):
        return "a number"
    if kind.startswith("string"):
        return "text"
    if kind == "enum":
        return "one of the names listed for it"
    return "another kind of value"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
