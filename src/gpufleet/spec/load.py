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
from gpufleet.spec.model import PATTERN_HELP, ClusterSpec

_DISCRIMINATED = {"provider", "filesystem"}


def load_spec(path: str | Path) -> ClusterSpec:
    """Load and validate a spec file. Raises ``SpecError`` with every problem listed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            f"spec file {path} does not exist", hint="give the path of a YAML spec, e.g. examples/local.yaml"
        ) from None
    except OSError as exc:
        raise SpecError(f"spec file {path} cannot be read: {exc.strerror}") from None
    return parse_spec(text, source=str(path))


def parse_spec(text: str, *, source: str = "<spec>") -> ClusterSpec:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{source} is not valid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{source} must hold a mapping of spec keys (name, provider, node_groups, ...), "
            f"not {type(data).__name__}",
            hint="see examples/local.yaml for the shape",
        )
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, data, root, source)) from None


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
        scalar = not isinstance(error["input"], Mapping | list)
        if value_present and scalar and error["type"] not in ("missing", "unknown_key"):
            head += f": got {_show(error['input'])}"
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
    for part in loc:
        if isinstance(node, Mapping):
            if part in node:
                path.append(part)
                node = node[part]
                continue
            if isinstance(part, str) and (node.get("kind") == part or (path and path[-1] in _DISCRIMINATED)):
                continue  # the discriminator value pydantic inserts into the location
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


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
