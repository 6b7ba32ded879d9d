"""Read a spec file's bytes into YAML data, with every way that can go wrong told in plain words.

- the path is a folder, missing, unreadable, binary, not UTF-8, empty or only comments;
- a key given twice in one mapping (PyYAML lets the last one win silently: a repeated ``count`` would
  change the cluster's size without a word) is an error naming both lines;
- tabs, inconsistent indentation, unclosed brackets and quotes are explained, with the line and a caret;
- nesting deeper than any spec needs (``MAX_DEPTH``), more than ``MAX_ALIASES`` aliases, and aliases
  that expand to more than ``MAX_NODES`` values (a "billion laughs") are refused before anything walks
  the expanded tree.

The composed node tree is returned with the data, so later messages can quote the text the user wrote
(``yes``, ``12.10``) and its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.errors import SpecError

MAX_BYTES = 1 << 20  # a spec is a few KiB; a megabyte is something else
MAX_DEPTH = 32  # the deepest real spec path is 5 levels (validation.min_busbw.<collective>)
MAX_ALIASES = 100
MAX_NODES = 100_000  # values with aliases expanded; a spec holds a few hundred, an inventory a few thousand

_EXAMPLE = "see examples/local.yaml for the shape"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (naming both lines) and counts alias uses."""

    aliases_seen = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > MAX_ALIASES:
                event = self.peek_event()
                raise SpecError(
                    f"more than {MAX_ALIASES} uses of YAML aliases (*name), "
                    f"at line {event.start_mark.line + 1}",
                    hint="write the values out; a spec needs no more than a few aliases",
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, list | dict):
                raise SpecError(
                    f"line {line}: a key must be a plain word, not a list or mapping",
                    hint="write 'key: value' with a plain key",
                )
            if key in seen:
                raise SpecError(
                    f"key '{key}' is given twice in the same block: line {seen[key]} and line {line}; "
                    "YAML would silently keep only the last one",
                    hint=f"keep one of them (lines {seen[key]} and {line})",
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_text(path: Path) -> str:
    """The file's text, or ``SpecError`` saying why it cannot be a spec."""
    if path.is_dir():
        raise SpecError(f"{path} is a folder, not a spec file", hint="give the path of a YAML file inside it")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(
            f"spec file {path} does not exist", hint="give the path of a YAML spec, e.g. examples/local.yaml"
        ) from None
    except OSError as exc:
        raise SpecError(f"spec file {path} cannot be read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise SpecError(
            f"{path} is {len(data)} bytes; a spec is a few KiB (the limit is {MAX_BYTES})",
            hint="check that this is the spec file you meant",
        )
    if b"\x00" in data:
        raise SpecError(f"{path} is a binary file, not YAML text", hint="give the path of a YAML spec")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} cannot be decoded",
            hint="save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
        ) from None


def parse(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """Data and the composed node tree of one YAML document; ``SpecError`` in plain words otherwise."""
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        what = "only comments" if text.strip() else "empty"
        raise SpecError(f"{source} is {what}: there is no spec in it", hint=_EXAMPLE)
    try:
        root = yaml.compose(text, Loader=_StrictLoader)
        _check_shape(root, source)
        loader = _StrictLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise SpecError(explain(exc, text, source)) from None
    except RecursionError:
        raise SpecError(f"{source} is nested too deeply to be a spec", hint=_EXAMPLE) from None
    return data, root


def _check_shape(root: yaml.Node | None, source: str) -> None:
    """Refuse a tree nested deeper than ``MAX_DEPTH`` or holding more than ``MAX_NODES`` values once its
    aliases are expanded. An alias (``*name``, also under a merge key ``<<``) is the node its anchor names,
    so a few dozen aliases can stand for a billion values ("billion laughs"): every walker after this
    one (construction with merge keys, validation, error paths) would go through each of them. The
    expanded size and depth are counted per distinct node, so this takes time in the size of the file."""
    if root is None:
        return
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose children are still being counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in size and not done:
            continue
        children = _children(node)
        if not done:
            if any(id(child) in open_ or child is node for child in children):
                raise SpecError(
                    f"{source}: the block at line {node.start_mark.line + 1} contains an alias to itself "
                    "(an anchor used inside its own block), which never ends",
                    hint="write the values out; a spec needs no recursive aliases",
                )
            open_.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in size)
            continue
        open_.discard(key)
        size[key] = 1 + sum(size[id(child)] for child in children)
        depth[key] = 1 + max((depth[id(child)] for child in children), default=0)
        if depth[key] > MAX_DEPTH:
            raise SpecError(
                f"{source} nests blocks {MAX_DEPTH}+ levels deep (line {node.start_mark.line + 1}); "
                "no spec field is deeper than 5",
                hint=_EXAMPLE,
            )
        if size[key] > MAX_NODES:
            line = node.start_mark.line + 1
            if size[key] > len(size) * 2:  # far more values than the file writes: aliases multiply them
                raise SpecError(
                    f"{source}: the YAML anchors and aliases (&name, *name) in the block at line {line} "
                    f"expand to more than {MAX_NODES} values (aliases of aliases multiply: a 'billion "
                    "laughs'); refused before reading further",
                    hint="write the values out; a spec needs no more than a few aliases, none nested",
                )
            raise SpecError(
                f"{source} holds more than {MAX_NODES} values (the block at line {line}); a spec holds "
                "a few hundred",
                hint="check that this is the spec file you meant",
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def explain(exc: yaml.YAMLError, text: str, source: str) -> str:
    """One YAML error in words a person knows, with the line quoted and a caret under the column."""
    mark = getattr(exc, "problem_mark", None)
    problem = str(getattr(exc, "problem", None) or exc)
    context = str(getattr(exc, "context", None) or "")
    context_mark = getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark else None
    opened = f"line {context_mark.line + 1}, column {context_mark.column + 1}" if context_mark else "above"
    if "'\\t'" in problem or "tab" in problem:
        words = "a tab character; YAML indents with spaces only: replace the tab with spaces"
    elif "flow sequence" in context or ("expected ',' or ']'" in problem):
        words = f"the '[' opened at {opened} is not closed with ']' (or an item lacks a comma)"
    elif "flow mapping" in context or "expected ',' or '}'" in problem:
        words = f"the '{{' opened at {opened} is not closed with '}}' (or an entry lacks a comma)"
    elif "quoted scalar" in context:
        words = f"the quote opened at {opened} is never closed"
    elif "mapping values are not allowed" in problem:
        words = (
            "a 'key: value' where YAML expected none: this line is probably indented differently "
            "from the keys around it, or a value holding ': ' needs quotes"
        )
    elif "expected <block end>" in problem or "did not find expected key" in problem:
        words = (
            f"this line's indentation does not match the block it belongs to (the block starts at "
            f"{opened}): keys of one block must start in the same column"
        )
    elif "did not find expected '-'" in problem:
        words = "a list item here must start with '-' at the same column as the items above it"
    elif "found undefined alias" in problem:
        words = f"{problem}: the alias names no anchor (&name) defined above it"
    elif "expected a single document" in context or "but found another document" in problem:
        words = "there is more than one YAML document (a second '---'); a spec is one document"
    else:
        words = problem
    where = f" at line {line}" if line else ""
    excerpt = ""
    if mark is not None:
        lines = text.splitlines()
        if 0 <= mark.line < len(lines):
            shown = lines[mark.line].replace("\t", "→")
            excerpt = f"\n    {shown}\n    {' ' * mark.column}^"
    return f"{source} is not valid YAML{where}: {words}{excerpt}"


def scalar_text(root: yaml.Node | None, path: list[str | int]) -> str | None:
    """The text the user wrote for the scalar at ``path`` (``yes``, ``12.10``), if it is one."""
    node = root
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return None
        if node is None:
            return None
    return node.value if isinstance(node, yaml.ScalarNode) else None
