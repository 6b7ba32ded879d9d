"""Filters for the pypi_wheels role: which pinned wheels a folder lacks, per machine architecture."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path


def _normalized(name: str) -> str:
    """A wheel file's project name: runs of '-', '_', '.' become '_' (PEP 427, PEP 503), lower case."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _platform_matches(filename: str, arch: str) -> bool:
    tags = filename[: -len(".whl")].split("-")[-1]
    return any(tag == "any" or tag.endswith("_" + arch) for tag in tags.split("."))


def wheel_file_patterns(packages: Mapping[str, str]) -> list[str]:
    """Glob patterns (for ansible.builtin.find) matching every file of the pinned wheels."""
    return [f"{_normalized(name)}-{version}-*.whl" for name, version in packages.items()]


def missing_wheels(
    files: Iterable[str], packages: Mapping[str, str], archs: Iterable[str]
) -> list[list[str]]:
    """[[arch, "name==version"], ...] for each pinned wheel with no file for that architecture."""
    names = [Path(path).name for path in files]
    missing = []
    for arch in sorted(set(archs)):
        for name, version in packages.items():
            prefix = f"{_normalized(name)}-{version}-"
            if not any(f.lower().startswith(prefix) and _platform_matches(f, arch) for f in names):
                missing.append([arch, f"{name}=={version}"])
    return missing


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"missing_wheels": missing_wheels, "wheel_file_patterns": wheel_file_patterns}
