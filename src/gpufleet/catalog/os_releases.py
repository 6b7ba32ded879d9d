"""The OS releases gpufleet's nodes boot, and the Slurm each one's distribution packages install.

``roles/slurm`` installs Slurm from the distribution (``roles/slurm/vars/Debian.yml``: slurmctld, slurmd,
slurm-client), so a node's Slurm release is its OS release's. A cluster whose nodes boot two releases runs
two Slurm releases, and Slurm refuses a slurmd newer than its slurmctld (SLURM_COMPATIBILITY_DOC): the
preflight checks ``gcp_os_release`` and ``aws_os_release`` and the slurm role's version check rest on this.

The clouds' modules map their image families onto these keys (``catalog.gcp.IMAGE_OS_RELEASE``,
``catalog.aws.FAMILY_OS_RELEASE``). Pure data and functions; creates nothing.

Sources, read 2026-11-24 (the version is the package's in the release's main or updates pocket):
- Debian 12 (bookworm): slurmd 22.05.8-4+deb12u3, https://packages.debian.org/bookworm/admin/slurmd (and
  ``apt-cache policy slurmd`` on a Debian 12 host: bookworm and bookworm-security both carry it).
- Ubuntu 22.04 (jammy): slurmd 21.08.5-2ubuntu1 [universe], https://packages.ubuntu.com/jammy/slurmd
- Ubuntu 24.04 (noble): slurmd 23.11.4-1.2ubuntu5 [universe], https://packages.ubuntu.com/noble/slurmd
- Compatibility: SchedMD's upgrade guide, "Compatibility Window": "Slurm has long supported in-place
  upgrades from the previous two major releases. With the change to a 6-month cycle in 2024, Slurm 24.11
  introduced compatibility with the previous three major releases" (SLURM_COMPATIBILITY_DOC); Google's
  Cluster Director: "Slurm requires that the compute nodes in a cluster run a Slurm version that is the
  same as or earlier than the version that your controller node runs" (CLUSTER_DIRECTOR_DOC).
"""

from __future__ import annotations

from dataclasses import dataclass

SLURM_COMPATIBILITY_DOC = "https://slurm.schedmd.com/upgrades.html"
CLUSTER_DIRECTOR_DOC = "https://docs.cloud.google.com/cluster-director/docs/slurm-controller-versions"


@dataclass(frozen=True)
class OsRelease:
    """One OS release and the Slurm its distribution ships."""

    key: str  # the name the clouds' image tables use
    name: str  # as a message says it
    slurm_package: str  # slurmd's Debian version string (epoch none) in that release
    source: str  # the page the version was read from

    @property
    def slurm(self) -> str:
        """Slurm's own version, the package's upstream part: '22.05.8' of '22.05.8-4+deb12u3'."""
        return self.slurm_package.split("-", 1)[0]

    @property
    def slurm_major(self) -> str:
        """The major release, 'YY.MM' (SchedMD's upgrade guide: 23.11 of 23.11.4)."""
        return ".".join(self.slurm.split(".")[:2])


OS_RELEASES: dict[str, OsRelease] = {
    release.key: release
    for release in (
        OsRelease(
            "debian-12",
            "Debian 12 (bookworm)",
            "22.05.8-4+deb12u3",
            "https://packages.debian.org/bookworm/admin/slurmd",
        ),
        OsRelease(
            "ubuntu-22.04",
            "Ubuntu 22.04 (jammy)",
            "21.08.5-2ubuntu1",
            "https://packages.ubuntu.com/jammy/slurmd",
        ),
        OsRelease(
            "ubuntu-24.04",
            "Ubuntu 24.04 (noble)",
            "23.11.4-1.2ubuntu5",
            "https://packages.ubuntu.com/noble/slurmd",
        ),
    )
}


# Slurm's major releases before its 6-month cycle, oldest first. SchedMD's upgrade guide, "Release Cycle":
# "Prior to the 24.05 release, Slurm operated on a 9-month release cycle for major versions. Slurm 24.05
# represents the first release on the new 6-month cycle" (May and November). roles/slurm keeps the same
# list (vars/main.yml, __slurm_majors_before_24_05) for the check it runs before the daemons start.
SLURM_MAJORS_BEFORE_24_05 = (
    "17.02", "17.11", "18.08", "19.05", "20.02", "20.11", "21.08", "22.05", "23.02", "23.11",
)  # fmt: skip


def slurm_release_index(major: str) -> int:
    """A major release's place in Slurm's order ('23.11' -> 9, '24.05' -> 10, '24.11' -> 11)."""
    if major in SLURM_MAJORS_BEFORE_24_05:
        return SLURM_MAJORS_BEFORE_24_05.index(major)
    year, month = (int(part) for part in major.split(".")[:2])
    return len(SLURM_MAJORS_BEFORE_24_05) + (year - 24) * 2 + month // 11


def slurmd_window(slurmctld_major: str) -> int:
    """How many major releases older than itself a slurmctld accepts: two, three from 24.11 on."""
    return 3 if slurm_release_index(slurmctld_major) >= slurm_release_index("24.11") else 2


def slurmd_refused(slurmctld_major: str, slurmd_major: str) -> bool:
    """Whether a slurmctld of one major release refuses a slurmd of another (newer, or too old)."""
    behind = slurm_release_index(slurmctld_major) - slurm_release_index(slurmd_major)
    return behind < 0 or behind > slurmd_window(slurmctld_major)
