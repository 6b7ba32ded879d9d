"""The Ansible the head relay ships: an ansible-core whose controller support covers the head's own Python.

The head runs ``ansible-playbook`` with the image's ``python3`` (Ubuntu 22.04: 3.10; Ubuntu 24.04 and
DGX OS 7: 3.12; Debian 12: 3.11). ansible-core's compiled dependencies (PyYAML, MarkupSafe, cffi,
cryptography) are built per Python version and platform, and each ansible-core series supports a
window of controller Pythons (``CONTROLLER_PYTHON``). So gpufleet ships, per head:

- this machine's own ansible-core and its dependencies, as they are installed here, when the head has this
  machine's Python minor version and machine architecture on Linux (nothing to download);
- else the wheels of an ansible-core release whose series supports the head's Python, downloaded for the
  head's Python, architecture and glibc (``pip download --only-binary=:all: --python-version ... --platform
  manylinux_...``), unpacked once into ``GPUFLEET_CACHE_DIR/relay-ansible/<key>/py`` and reused: this
  machine's own release when its series covers the head's Python (the release the roles are tested with),
  else the newest release of ``FALLBACK_RELEASES`` that does (ansible-core 2.17 for Python 3.10).

The collections the roles name are pure Python and ship from this machine in every case (their
``requires_ansible`` is at most 2.16 today: tests/configure/test_head_ansible.py holds it).
"""

from __future__ import annotations

import fcntl
import platform
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from gpufleet.cache import cache_dir
from gpufleet.errors import ConfigureError

# ansible-core's controller Python support per series (ansible-core's "Releases and maintenance" page,
# its ansible-core support matrix: https://docs.ansible.com/ansible/latest/reference_appendices/
# release_and_maintenance.html, read 2026-11-27 through its mirror
# gist sivel/3fc22827e48e60c077a6db058ed6bee2):
# 2.16 and 2.17: Python 3.10-3.12; 2.18 and 2.19: 3.11-3.13; 2.20 and 2.21: 3.12-3.14. End of life: 2.17 May
# 2026, 2.18 Nov 2026, 2.19 May 2027, 2.20 Nov 2027.
CONTROLLER_PYTHON: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "2.16": ((3, 10), (3, 12)),
    "2.17": ((3, 10), (3, 12)),
    "2.18": ((3, 11), (3, 13)),
    "2.19": ((3, 11), (3, 13)),
    "2.20": ((3, 12), (3, 14)),
    "2.21": ((3, 12), (3, 14)),
}
# Releases shipped to a head whose Python this machine's ansible-core does not support, newest first: the
# last release of each series (PyPI's ansible-core release history, read 2026-11-27). 2.17.14 is the last
# of the one series that still runs on Python 3.10 (Ubuntu 22.04's), and is past its end of life (May 2026):
# docs/architecture.md says what that means for the 22.04 images.
FALLBACK_RELEASES = ("2.19.14", "2.17.14")
# The oldest manylinux glibc a wheel may target (manylinux2014 = manylinux_2_17).
_OLDEST_GLIBC_MINOR = 17


class NoAnsibleForHead(ConfigureError):
    """No ansible-core gpufleet can ship runs on the head's Python, or its download failed."""


@dataclass(frozen=True)
class HeadPython:
    """What the head's probe printed: its python3's version, machine architecture and glibc."""

    major: int
    minor: int
    machine: str  # platform.machine(): x86_64, aarch64
    glibc: str  # platform.libc_ver()'s version, "" when not glibc

    @property
    def version(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def text(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, line: str) -> HeadPython:
        """The probe's line: ``<major> <minor> <machine> <glibc or "-">``."""
        major, minor, machine, glibc = line.split()
        return cls(int(major), int(minor), machine, "" if glibc == "-" else glibc)

    @classmethod
    def here(cls) -> HeadPython:
        return cls(sys.version_info[0], sys.version_info[1], platform.machine(), platform.libc_ver()[1])


# The probe's Python one-liner (printed after $HOME, before nproc): what HeadPython.parse reads.
PROBE = (
    'python3 -c "import platform, sys; '
    "print(sys.version_info[0], sys.version_info[1], platform.machine(), platform.libc_ver()[1] or '-')\""
)


def series(release: str) -> str:
    return ".".join(release.split(".")[:2])


def supports(release: str, python: tuple[int, int]) -> bool:
    window = CONTROLLER_PYTHON.get(series(release))
    return window is not None and window[0] <= python <= window[1]


def site_packages() -> Path:
    """The folder this machine's ansible-core is installed in."""
    import ansible

    return Path(ansible.__file__).resolve().parents[1]


def runner_release() -> str:
    from ansible.release import __version__

    return str(__version__)


def choose_release(python: tuple[int, int], ours: str) -> str | None:
    """This machine's ansible-core when its series supports ``python``, else the newest fallback that does."""
    for release in (ours, *FALLBACK_RELEASES):
        if supports(release, python):
            return release
    return None


def same_as_here(head: HeadPython, here: HeadPython | None = None) -> bool:
    """Can the head import this machine's installed ansible-core and its compiled dependencies?"""
    here = here or HeadPython.here()
    same = sys.platform == "linux" and (head.version, head.machine) == (here.version, here.machine)
    # This machine's compiled wheels may need its own glibc: a head with an older one gets a download.
    return same and _glibc(head.glibc) >= _glibc(here.glibc)


def _glibc(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def platform_tags(head: HeadPython) -> list[str]:
    """pip's ``--platform`` values for the head: manylinux2014 and every manylinux_2_N up to its glibc."""
    match = re.match(r"2\.(\d+)", head.glibc)
    if match is None:
        raise NoAnsibleForHead(
            f"the head's python3 runs on {head.glibc or 'no glibc'}: gpufleet ships manylinux wheels, which "
            "need glibc",
            hint="run Ansible from this machine (GPUFLEET_CONFIGURE_FROM=here)",
        )
    newest = int(match[1])
    tags = [f"manylinux2014_{head.machine}"]
    tags += [f"manylinux_2_{minor}_{head.machine}" for minor in range(_OLDEST_GLIBC_MINOR, newest + 1)]
    return tags


def cache_key(release: str, head: HeadPython) -> str:
    return f"ansible-core-{release}-cp{head.major}{head.minor}-{head.machine}-glibc{head.glibc}"


def download(release: str, head: HeadPython, folder: Path) -> Path:
    """The wheels of ``ansible-core==release`` and its requirements for ``head``, unpacked into
    ``folder/py`` (made once: a complete folder carries ``.complete``). Returns ``folder/py``.

    Two configures at once (two clusters' heads of one Python) make the folder once: the second waits on
    an advisory lock beside it, then finds it complete (before, both ran pip into one folder)."""
    py = folder / "py"
    if (folder / ".complete").exists():
        return py
    folder.parent.mkdir(parents=True, exist_ok=True)
    with folder.with_name(folder.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / ".complete").exists():
            return py
        return _download(release, head, folder, py)


def _download(release: str, head: HeadPython, folder: Path, py: Path) -> Path:
    wheels = folder / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--only-binary=:all:", "--python-version", head.text, "--implementation", "cp",
            "--abi", f"cp{head.major}{head.minor}", "--dest", str(wheels)]  # fmt: skip
    for tag in platform_tags(head):
        argv += ["--platform", tag]
    argv.append(f"ansible-core=={release}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
        raise NoAnsibleForHead(
            f"cannot download ansible-core {release} for the head's Python {head.text} ({head.machine}, "
            f"glibc {head.glibc}): pip download exited {done.returncode}:\n{tail}",
            hint="check that this machine reaches its Python package index (pip's own configuration), or run "
            "Ansible from this machine (GPUFLEET_CONFIGURE_FROM=here)",
        )
    py.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(py)
    (folder / ".complete").write_text(" ".join(sorted(w.name for w in wheels.glob("*.whl"))) + "\n")
    return py


@dataclass(frozen=True)
class ShippedAnsible:
    release: str
    site_packages: Path  # the folder whose packages the head imports (PYTHONPATH)
    downloaded: bool  # False: this machine's own installed ansible-core


def release_for(head: HeadPython, ours: str | None = None) -> str:
    """The ansible-core release the head runs, or ``NoAnsibleForHead`` naming the series' windows."""
    release = choose_release(head.version, ours or runner_release())
    if release is None:
        windows = ", ".join(
            f"{s} {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}" for s, (lo, hi) in CONTROLLER_PYTHON.items()
        )
        raise NoAnsibleForHead(
            f"the head's python3 is {head.text}, which no ansible-core gpufleet ships supports as a "
            f"controller (ansible-core {windows})",
            hint="run Ansible from this machine (unset GPUFLEET_CONFIGURE_FROM, or set it to 'here')",
        )
    return release


def for_head(head: HeadPython, *, here: HeadPython | None = None, ours: str | None = None) -> ShippedAnsible:
    """The ansible-core the head runs: this machine's installed one, or the downloaded release's folder."""
    ours = ours or runner_release()
    release = release_for(head, ours)
    if release == ours and same_as_here(head, here):
        return ShippedAnsible(ours, site_packages(), downloaded=False)
    folder = cache_dir() / "relay-ansible" / cache_key(release, head)
    return ShippedAnsible(release, download(release, head, folder), downloaded=True)
