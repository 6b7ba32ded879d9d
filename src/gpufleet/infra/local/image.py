"""The local backend's node image, built on this machine (no registry is reachable) and cached.

Two layers, each kept in podman's image store and reused by every later cluster:
1. ``localhost/gpufleet-base:<release>``: ``debootstrap --variant=minbase`` from the Debian mirror,
   imported with ``podman import`` (about a minute, once per machine);
2. ``localhost/gpufleet-node:<release>-<hash>``: the Containerfile in ``image/`` on top (systemd, sshd,
   python3). The tag hashes the build context, so editing the Containerfile makes a new image.
A file lock serialises builds when two clusters come up at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra.local.podman import HOST_PACKAGES, Podman
from gpufleet.progress import Reporter

BASE_IMAGE = "localhost/gpufleet-base"
NODE_IMAGE = "localhost/gpufleet-node"
_CONTEXT_FILES = ("Containerfile", "sources.list", "ssh-hostkeys.conf", "sshd-gpufleet.conf", "hosts")


def _context_dir() -> Path:
    return Path(str(resources.files("gpufleet.infra.local").joinpath("image")))


def node_image_ref(release: str, mirror: str) -> str:
    digest = hashlib.sha256()
    for name in _CONTEXT_FILES:
        digest.update(name.encode())
        digest.update((_context_dir() / name).read_bytes())
    digest.update(f"{release} {mirror}".encode())
    return f"{NODE_IMAGE}:{release}-{digest.hexdigest()[:12]}"


@contextmanager
def build_lock(cache_dir: Path, name: str = "image-build") -> Iterator[None]:
    """Hold ``<cache_dir>/<name>.lock``: one build of a given image at a time on this machine."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_node_image(
    podman: Podman, cache_dir: Path, *, release: str, mirror: str, reporter: Reporter
) -> tuple[str, bool]:
    """Return the node image reference, building what is missing. The bool says whether it was cached."""
    ref = node_image_ref(release, mirror)
    if podman.exists("image", ref):
        return ref, True
    with build_lock(cache_dir):
        if podman.exists("image", ref):  # another process built it while we waited
            return ref, True
        base = f"{BASE_IMAGE}:{release}"
        if not podman.exists("image", base):
            with reporter.step(f"debootstrap {release} (minbase) into a base image"):
                _build_base(podman, cache_dir, base, release=release, mirror=mirror)
        with reporter.step("build the node image (systemd, sshd, python3)"):
            podman.run(
                "build",
                "--quiet",
                "--layers=false",
                "--pull=never",
                "--build-arg",
                f"BASE={base}",
                "--build-arg",
                f"MIRROR={mirror}",
                "--build-arg",
                f"RELEASE={release}",
                "--label",
                "gpufleet.image=node",
                "-t",
                ref,
                "-f",
                str(_context_dir() / "Containerfile"),
                str(_context_dir()),
                timeout=1800,
                what="building the node image",
            )
    return ref, False


def _build_base(podman: Podman, cache_dir: Path, base: str, *, release: str, mirror: str) -> None:
    if shutil.which("debootstrap") is None:
        raise EnvironmentProblem(
            "debootstrap is not installed; the local backend builds its node image from the Debian mirror",
            hint=f"apt-get install -y {HOST_PACKAGES}",
        )
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=cache_dir) as tmp:
        rootfs = Path(tmp) / "rootfs"
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", release, str(rootfs), mirror],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            raise ProvisionError(
                f"debootstrap of {release} from {mirror} failed (exit {done.returncode}):\n{tail}",
                hint="check that the mirror is reachable (provider.mirror in the spec)",
            )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(
            ["podman", "import", "--change", "CMD=/bin/bash", "-", base],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            env=podman.env,
            check=False,
            timeout=1800,
        )
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise ProvisionError(
                f"importing the {release} rootfs into podman failed:\n{imported.stderr[-800:]}"
            )
