"""The OS releases gpufleet's nodes boot.

Every node runs the one Slurm the slurm role builds from SchedMD's release (``gpufleet.catalog.slurm``,
docs/slurm.md), whatever its OS release. The release still decides what the roles install by name (its
packages), the Python that runs Ansible's modules on the node, and which build of that Slurm the node gets:
the role builds once per node userland (dpkg's vendor, glibc, architecture), so a cluster whose groups boot
two releases builds Slurm twice, on the first node of each, and keeps both builds in the control host's
cache. The preflight checks ``gcp_os_release`` and ``aws_os_release`` say so (``preflight.common``).

The clouds' modules map their image families onto these keys (``catalog.gcp.IMAGE_OS_RELEASE``,
``catalog.aws.FAMILY_OS_RELEASE``), and the image manifests name one (``catalog/images.yaml``). Pure data;
creates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OsRelease:
    """One OS release a node boots."""

    key: str  # the name the clouds' image tables and the image manifests use
    name: str  # as a message says it


OS_RELEASES: dict[str, OsRelease] = {
    release.key: release
    for release in (
        OsRelease("debian-12", "Debian 12 (bookworm)"),
        OsRelease("ubuntu-22.04", "Ubuntu 22.04 (jammy)"),
        OsRelease("ubuntu-24.04", "Ubuntu 24.04 (noble)"),
    )
}
