"""The stacks of a Pulumi project folder (``stacks/``): which spec each one makes, and which stacks a
change touches. Read by the reaper (``gpufleet reap --destroy-stacks``) and by the CI workflows
(``examples/ci/``), which plan only the stacks whose files changed and run ``pulumi up`` on one stack.

Each ``Pulumi.<stack>.yaml`` names its spec in ``gpufleet:spec``, relative to the folder. A change
touches a stack when it changes the stack's config file or its spec; a change to what every stack runs
(the project's ``Pulumi.yaml`` and program, ``src/``, ``roles/``, ``playbooks/``, ``pyproject.toml``)
touches every stack. Only pull requests use this: nothing is created from it.

``python -m gpufleet.infra.stack_configs changed PROJECT KIND < CHANGED_PATHS`` prints the touched stacks
of one cloud as a JSON list; ``... spec PROJECT STACK`` prints the spec path a stack makes.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from gpufleet.errors import GpufleetError, SpecError
from gpufleet.spec import load_spec
from gpufleet.spec.model import ClusterSpec

# What every stack runs: a change here touches them all (paths from the repository root).
SHARED = ("src/", "roles/", "playbooks/", "pyproject.toml")
PROJECT_FILES = ("Pulumi.yaml", "__main__.py")
STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")  # what the workflows accept as input


@dataclass(frozen=True)
class Stack:
    """One stack of a Pulumi project folder: its name (``Pulumi.<name>.yaml``) and the spec it makes."""

    name: str
    spec_path: Path
    spec: ClusterSpec


def stack_names(project: Path) -> list[str]:
    return sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in project.glob("Pulumi.*.yaml"))


def read_stack(project: Path, name: str) -> Stack | None:
    """The stack's spec, or None when its config names none (not a gpufleet stack). A config or spec that
    cannot be read is a ``SpecError`` naming the file."""
    if not STACK_NAME.match(name):
        raise SpecError(f"stack name {name!r} is not a Pulumi stack name", hint="e.g. p5-fsx")
    path = project / f"Pulumi.{name}.yaml"
    try:
        config = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config") or {}
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise SpecError(f"stack config {path} cannot be read ({type(exc).__name__}: {exc})") from None
    spec_path = config.get("gpufleet:spec")
    if not spec_path:
        return None
    return Stack(name, project / str(spec_path), load_spec(project / str(spec_path)))


def project_stacks(project: Path, problems: list[str] | None = None) -> dict[str, list[Stack]]:
    """The gpufleet stacks of the folder by the cluster their spec names. A stack that cannot be read goes
    to ``problems`` (when given) with the reason, so one broken file never stops the others."""
    found: dict[str, list[Stack]] = {}
    for name in stack_names(project):
        try:
            stack = read_stack(project, name)
        except GpufleetError as exc:
            if problems is not None:
                problems.append(
                    f"stack {name} ({project / f'Pulumi.{name}.yaml'}): {exc.message.splitlines()[0]}"
                )
            continue
        if stack is not None:
            found.setdefault(stack.spec.name, []).append(stack)
    return found


def changed_stacks(project: Path, root: Path, changed: list[str], kind: str) -> list[str]:
    """The stacks of cloud ``kind`` that a change to ``changed`` (paths from ``root``) touches."""
    paths = {PurePosixPath(path.strip()) for path in changed if path.strip()}
    folder = PurePosixPath(project.resolve().relative_to(root.resolve()).as_posix())
    everything = any(
        str(path).startswith(SHARED) or path in {folder / name for name in PROJECT_FILES} for path in paths
    )
    touched = []
    for stacks in project_stacks(project).values():
        for stack in stacks:
            if stack.spec.provider.kind != kind:
                continue
            spec = PurePosixPath(stack.spec_path.resolve().relative_to(root.resolve()).as_posix())
            if everything or spec in paths or folder / f"Pulumi.{stack.name}.yaml" in paths:
                touched.append(stack.name)
    return sorted(touched)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "changed":
        project = Path(args[1])
        print(json.dumps(changed_stacks(project, Path.cwd(), sys.stdin.read().splitlines(), args[2])))
        return 0
    if len(args) == 3 and args[0] == "spec":
        try:
            stack = read_stack(Path(args[1]), args[2])
        except GpufleetError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 3
        if stack is None:
            print(f"error: stack {args[2]} in {args[1]} names no gpufleet:spec", file=sys.stderr)
            return 3
        print(stack.spec_path.resolve().relative_to(Path.cwd().resolve()).as_posix())
        return 0
    print("usage: python -m gpufleet.infra.stack_configs changed PROJECT KIND < PATHS | spec PROJECT STACK")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
