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


# The manylinux tags pip knows by their old names (PEP 513, 571, 599), the glibc they stand for, and the
# architectures each was defined for. pip itself widens only these legacy tags (manylinux2014 -> 2010 -> 1)
# when given one as --platform; a manylinux_2_X tag is taken literally.
_LEGACY_MANYLINUX = {
    (2, 17): ("manylinux2014", ("x86_64", "i686", "aarch64", "armv7l", "ppc64", "ppc64le", "s390x")),
    (2, 12): ("manylinux2010", ("x86_64", "i686")),
    (2, 5): ("manylinux1", ("x86_64", "i686")),
}
_OLDEST_GLIBC = {"x86_64": 5, "i686": 5}  # glibc 2.5 for x86; manylinux starts at 2.17 on the others


def manylinux_platforms(arch: str, glibc: str) -> list[str]:
    """Every manylinux platform tag a node with glibc ``glibc`` ("2.28") on ``arch`` accepts, newest first.

    This is what pip computes for the machine it runs on (packaging.tags' manylinux platform_tags), and
    what it does not compute for an explicit ``--platform``: ``--platform manylinux_2_28_x86_64`` alone
    finds no wheel tagged manylinux2014_x86_64 (NVIDIA's CUDA wheels) or manylinux_2_27_x86_64 (its NCCL
    wheel). Pass each tag.
    """
    major, minor = (int(part) for part in str(glibc).split(".")[:2])
    if major != 2:
        raise ValueError(f"glibc {glibc}: only glibc 2.x is known to manylinux")
    tags = []
    for current in range(minor, _OLDEST_GLIBC.get(arch, 17) - 1, -1):
        tags.append(f"manylinux_2_{current}_{arch}")
        legacy = _LEGACY_MANYLINUX.get((2, current))
        if legacy and arch in legacy[1]:
            tags.append(f"{legacy[0]}_{arch}")
    return tags


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
        return {
            "manylinux_platforms": manylinux_platforms,
            "missing_wheels": missing_wheels,
            "wheel_file_patterns": wheel_file_patterns,
        }
