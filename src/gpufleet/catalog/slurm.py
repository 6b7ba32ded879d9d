"""The Slurm releases gpufleet builds (roles/slurm), each with the checksum of its upstream source.

Every node of every cluster runs one Slurm, built by the slurm role from SchedMD's release and installed
as one package (docs/slurm.md). A release is known here when its source is pinned: SchedMD's git tag as
GitHub archives it (``https://github.com/SchedMD/slurm/archive/refs/tags/<tag>.tar.gz``), whose bytes
Debian's archive also carries as the ``slurm-wlm`` source package's ``.orig.tar.gz``. SchedMD's own
download site serves a different file (``slurm-<version>.tar.bz2``) with another checksum: not this one.

``roles/slurm/vars/main.yml`` (``__slurm_releases``) holds the same table for the role, which runs without
gpufleet on a bare-metal control host; tests/catalog/test_slurm_releases.py keeps the two equal. Pure data;
imports nothing (preflight's slurm_release_pinned reads it; the spec only checks the version's form).

Sources, read 2026-11-27:
- 24.11.5: Debian 13 (trixie) ``slurm-wlm 24.11.5-4+deb13u1``, source index (``apt-cache showsrc slurm-wlm``
  with a trixie deb-src line) and the file itself: ``slurm-wlm_24.11.5.orig.tar.gz``, 9,907,599 bytes,
  sha256 ``e1a5547e...e332``, top folder ``slurm-slurm-24-11-5-1/`` (SchedMD's tag ``slurm-24-11-5-1``;
  Debian's version has no ``+dfsg``: not repacked). Downloaded here from
  https://deb.debian.org/debian/pool/main/s/slurm-wlm/slurm-wlm_24.11.5.orig.tar.gz and checked; GitHub is
  not reachable from this machine, so the GitHub URL was not fetched here.
- Newer releases: sid and forky's source index lists ``slurm-wlm 26.05.5-1`` (sha256 of its orig
  ``42cc1177...`` in the index), but the mirror answered 404 for its files that day, so it is not pinned.
"""

from __future__ import annotations

from dataclasses import dataclass

GITHUB_ARCHIVE = "https://github.com/SchedMD/slurm/archive/refs/tags/{tag}.tar.gz"
DEBIAN_POOL = "https://deb.debian.org/debian/pool/main/s/slurm-wlm/slurm-wlm_{version}.orig.tar.gz"


@dataclass(frozen=True)
class SlurmRelease:
    """One Slurm release whose source tarball gpufleet pins."""

    version: str  # "24.11.5"
    tag: str  # SchedMD's git tag, "slurm-24-11-5-1"
    sha256: str  # of GitHub's tag archive, which Debian's .orig.tar.gz repeats byte for byte
    size: int  # bytes

    @property
    def major(self) -> str:
        """The major release, 'YY.MM'."""
        return ".".join(self.version.split(".")[:2])

    def urls(self) -> tuple[str, ...]:
        """Where the role fetches the tarball, tried in this order (one checksum for all)."""
        return (GITHUB_ARCHIVE.format(tag=self.tag), DEBIAN_POOL.format(version=self.version))


SLURM_RELEASES: dict[str, SlurmRelease] = {
    release.version: release
    for release in (
        SlurmRelease(
            "24.11.5",
            "slurm-24-11-5-1",
            "e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332",
            9_907_599,
        ),
    )
}
# The release a spec gets when software.slurm is not set.
DEFAULT_SLURM = "24.11.5"
