"""Build stand-in .deb packages with dpkg-deb and index them as a flat apt repository (dpkg-scanpackages).

One builder for every test that serves vendor packages from a local ``file:`` repository
(tests/cluster/test_gpu_roles_converge.py, tests/cluster/test_gpu_twins.py). A package is its control
fields, its files (text, mode; or a symlink) and optional maintainer scripts; what goes in them is the
caller's, sourced beside the caller's data (tests/twins/SOURCES.md).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# A file of a package: (text, mode), or ("->target", 0) for a symbolic link, or (b"bytes", mode).
FileSpec = tuple[str | bytes, int]


@dataclass(frozen=True)
class Deb:
    name: str
    version: str  # the full Debian version, epoch included ("1:4.4.2-1")
    files: dict[str, FileSpec] = field(default_factory=dict)
    depends: str = ""
    architecture: str = "amd64"
    postinst: str = ""  # shell run by dpkg after unpacking (configure)
    prerm: str = ""
    triggers: str = ""  # DEBIAN/triggers, e.g. "activate-noawait ldconfig" (dh_makeshlibs' for libraries)
    description: str = ""

    @property
    def filename(self) -> str:
        """apt's archive name: the version without its epoch."""
        return f"{self.name}_{self.version.split(':')[-1]}_{self.architecture}.deb"


def build_deb(deb: Deb, out: Path) -> Path:
    """Write ``deb`` to ``out`` (a file path) with dpkg-deb, root-owned."""
    with tempfile.TemporaryDirectory(prefix="deb-") as work:
        root = Path(work) / "root"
        (root / "DEBIAN").mkdir(parents=True)
        control = (
            f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: {deb.architecture}\n"
            "Maintainer: gpufleet test stand-in\n"
        )
        control += f"Depends: {deb.depends}\n" if deb.depends else ""
        control += f"Description: gpufleet stand-in for the vendor's {deb.name}\n"
        if deb.description:
            control += f" {deb.description}\n"
        (root / "DEBIAN" / "control").write_text(control)
        for script, text in (("postinst", deb.postinst), ("prerm", deb.prerm)):
            if text:
                path = root / "DEBIAN" / script
                path.write_text("#!/bin/sh\nset -e\n" + text + "\n")
                path.chmod(0o755)
        if deb.triggers:
            (root / "DEBIAN" / "triggers").write_text(deb.triggers + "\n")
        for path, (content, mode) in deb.files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str) and content.startswith("->"):
                target.symlink_to(content[2:])
                continue
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
            target.chmod(mode)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-b", str(root), str(out)],
            check=True,
            capture_output=True,
        )
    return out


def write_index(repo: Path) -> None:
    """``Packages`` for a flat repository (``deb [trusted=yes] file:<repo> ./``), every version kept."""
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    (repo / "Packages").write_text(packages)


def write_release(repo: Path, origin: str, label: str) -> None:
    """A flat repository's ``Release`` (apt reads Origin and Label from it: ``Pin: release l=<label>``)."""
    packages = (repo / "Packages").read_bytes()
    (repo / "Release").write_text(
        f"Origin: {origin}\nLabel: {label}\nArchitectures: amd64 all\n"
        f"Date: Tue, 24 Nov 2026 00:00:00 UTC\nSHA256:\n {hashlib.sha256(packages).hexdigest()} "
        f"{len(packages)} Packages\n"
    )


def build_repo(repo: Path, debs: list[Deb], release: tuple[str, str] | None = None) -> None:
    """Every package into ``repo`` under apt's archive names, then the index (and, given (origin, label),
    the Release file)."""
    repo.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        build_deb(deb, repo / deb.filename)
    write_index(repo)
    if release:
        write_release(repo, *release)


def shared_object(soname: str) -> bytes:
    """An empty ELF shared object whose SONAME is ``soname``: ldconfig caches only real ELF objects, and
    the roles ask ``ldconfig -p`` for libraries (libnccl.so.2). Built with binutils (a dependency of
    dpkg-dev): as and ld, no compiler."""
    if shutil.which("as") is None or shutil.which("ld") is None:
        raise RuntimeError(
            "binutils (as, ld) is needed to build the stand-in shared objects: apt install dpkg-dev"
        )
    with tempfile.TemporaryDirectory(prefix="so-") as work:
        obj, lib = Path(work) / "empty.o", Path(work) / "lib.so"
        subprocess.run(["as", "-o", str(obj), "/dev/null"], check=True, capture_output=True)
        subprocess.run(["ld", "-shared", "-soname", soname, "-o", str(lib), str(obj)], check=True,
                       capture_output=True)  # fmt: skip
        return lib.read_bytes()
