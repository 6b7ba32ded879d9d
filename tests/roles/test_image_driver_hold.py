"""Verify mode keeps the image's driver when NVIDIA's repository, holding a newer one, is added (issue 24).

Google's accelerator image ships the driver as Canonical's -server packages; gpufleet then adds NVIDIA's CUDA
repository (cuda_toolkit) and installs CUDA, NCCL and DCGM from it. Cluster Toolkit holds the image's driver
packages and ranks NVIDIA's repository at priority 400 first; nvidia_driver's verify mode does the same
(tasks/image-driver.yml). The stand-ins come from ``nvidia_apt/image_driver.csv`` (each row names its source):
the image's packages installed in a private dpkg status, a distribution repository and NVIDIA's, both flat,
each with a Release file, NVIDIA's labelled "NVIDIA CUDA" as NVIDIA's own are. The role runs for real (no
--check) on localhost through the host's python3-apt, with APT_CONFIG and DPKG_ADMINDIR pointing at the
private tree; apt-get -s then says what an upgrade or an install would do. The host's packages are untouched.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playbook_json import run_playbook
from test_nvidia_apt_specs import HOST_PYTHON, INSTALLED, _build, _extra, _inventory

DATA = Path(__file__).parent / "nvidia_apt" / "image_driver.csv"
IMAGE_BUILD = "580.95.05-0ubuntu0.24.04.2"
NVIDIA_BUILD = "580.105.08-0ubuntu1"
IMAGE_DRIVER = {
    "libnvidia-cfg1-580-server", "libnvidia-compute-580-server", "libnvidia-nscq-580",
    "nvidia-compute-utils-580-server", "nvidia-fabricmanager-580", "nvidia-utils-580-server",
    "nvidia-imex-580",
}  # fmt: skip
RELEASES = {  # the Release fields apt's pins read: l= is Label, o= is Origin
    "ubuntu": "Origin: Ubuntu\nLabel: Ubuntu\nSuite: noble-updates\n",
    "nvidia": "Origin: NVIDIA\nLabel: NVIDIA CUDA\n",  # NVIDIA/cuda-repo-management repo-debian.sh
}


@dataclass
class ImageWorld:
    config: Path
    admindir: Path
    pin: Path
    env: dict[str, str]

    def apt(self, *args: str) -> str:
        return subprocess.run(["apt-get", "-s", *args], env=self.env, check=True, capture_output=True,
                              text=True).stdout  # fmt: skip

    def upgrades(self) -> dict[str, str]:
        """What ``apt-get upgrade`` (an admin's, unattended-upgrades') would move: package -> new version."""
        return dict(re.findall(r"^Inst (\S+) \[\S+\] \((\S+) ", self.apt("upgrade"), re.MULTILINE))

    def candidate(self, package: str) -> str:
        policy = subprocess.run(["apt-cache", "policy", package], env=self.env, check=True,
                                capture_output=True, text=True).stdout  # fmt: skip
        found = re.search(r"Candidate: (\S+)", policy)
        assert found, policy
        return found.group(1)

    def held(self) -> set[str]:
        status = (self.admindir / "status").read_text()
        return set(re.findall(r"^Package: (\S+)\nStatus: hold ok installed$", status, re.MULTILINE))


def _release(repo: Path, fields: str) -> None:
    data = (repo / "Packages").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    (repo / "Release").write_text(f"{fields}SHA256:\n {digest} {len(data)} Packages\n")


@pytest.fixture
def world(tmp_path: Path) -> ImageWorld:
    if os.geteuid() != 0 or subprocess.run([HOST_PYTHON, "-c", "import apt"], check=False).returncode:
        pytest.fail(f"needs root, dpkg-dev and python3-apt for {HOST_PYTHON}")
    with DATA.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    tree = tmp_path / "apt"
    for folder in ("etc/apt/preferences.d", "etc/apt/apt.conf.d", "etc/apt/sources.list.d",
                   "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg/updates",
                   "var/lib/dpkg/info"):  # fmt: skip
        (tree / folder).mkdir(parents=True, exist_ok=True)
    admindir = tree / "var/lib/dpkg"
    (admindir / "available").write_text("")
    stanzas, sources = [], []
    for index, row in enumerate(rows):
        name = f"{row['package']}_{row['version']}_{row['architecture']}.deb"
        deb = _build(tmp_path / "build" / str(index), row, tmp_path / (row["repo"] or "image") / name)
        if row["installed"] == "yes":
            control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True,
                                     text=True).stdout.strip()  # fmt: skip
            head, rest = control.split("\n", 1)
            stanzas.append(f"{head}\n{INSTALLED}\n{rest}\n")
    (admindir / "status").write_text("\n".join(stanzas))
    for repo, fields in RELEASES.items():
        packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=tmp_path / repo,
                                  check=True, capture_output=True, text=True).stdout  # fmt: skip
        (tmp_path / repo / "Packages").write_text(packages)
        _release(tmp_path / repo, fields)
        sources.append(f"deb [trusted=yes] file:{tmp_path / repo} ./\n")
    (tree / "etc/apt/sources.list").write_text("".join(sources))
    config = tmp_path / "apt.conf"
    config.write_text(
        f'Dir::State "{tree}/var/lib/apt";\nDir::State::status "{admindir}/status";\n'
        f'Dir::Cache "{tree}/var/cache/apt";\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
        f'Dir::Etc "{tree}/etc/apt";\nDir::Etc::sourcelist "sources.list";\n'
        'Dir::Etc::sourceparts "sources.list.d";\nDir::Etc::preferences "preferences";\n'
        'Dir::Etc::preferencesparts "preferences.d";\nDir::Etc::parts "apt.conf.d";\n'
        'Debug::NoLocking "true";\nAPT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\n'
    )
    env = {**os.environ, "APT_CONFIG": str(config), "DPKG_ADMINDIR": str(admindir)}
    subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True, text=True)
    return ImageWorld(config, admindir, tree / "etc/apt/preferences.d/cuda-repository-pin-600", env)


def _run_role(world: ImageWorld, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """nvidia_driver as site.yml runs it on an accelerator-image node, install phase (the phase in which
    cuda_toolkit then adds NVIDIA's repository): the driver component is verify, from the image manifest."""
    play = [{
        "name": "nvidia_driver on the accelerator image",
        "hosts": "localhost",
        "environment": {"APT_CONFIG": str(world.config), "DPKG_ADMINDIR": str(world.admindir)},
        "roles": ["nvidia_driver"],
    }]  # fmt: skip
    # nvidia_driver_add_repo false: the stand-in world is NVIDIA's repository (verify mode would add it).
    inventory = _inventory(gpufleet_gpus=8, gpufleet_gpu_stack="verify", nvidia_driver_add_repo=False,
                           gpufleet_gpu_components={"driver": "verify", "cuda": "install"})  # fmt: skip
    rc, results = run_playbook(
        tmp_path, inventory, play, "--tags", "install", *_extra(__nvidia_driver_repo_pin_file=str(world.pin))
    )
    assert rc == 0, results
    return results["localhost"]


def test_the_image_driver_stays_beside_a_newer_one_in_nvidias_repository(
    world: ImageWorld, tmp_path: Path
) -> None:
    # The stand-ins model the risk: untouched, an upgrade moves the image's driver to NVIDIA's build, and a
    # driver package the image lacks comes from NVIDIA's newer build rather than the distribution's.
    assert world.upgrades() == dict.fromkeys(IMAGE_DRIVER, NVIDIA_BUILD)
    assert world.candidate("libnvidia-decode-580-server") == NVIDIA_BUILD

    tasks = _run_role(world, tmp_path)
    assert world.upgrades() == {}, "apt upgrade would still move the image's driver"
    assert world.candidate("libnvidia-decode-580-server") == IMAGE_BUILD, world.pin
    assert world.held() == IMAGE_DRIVER  # only what is installed, and never dkms
    assert world.pin.read_text().splitlines()[-3:] == [
        "Package: *", "Pin: release l=NVIDIA CUDA", "Pin-Priority: 400",
    ]  # fmt: skip
    assert tasks["Hold the image's driver packages"].get("changed"), tasks

    (tmp_path / "again").mkdir()
    again = _run_role(world, tmp_path / "again")  # idempotent: a second run changes nothing
    assert not again["Hold the image's driver packages"].get("changed"), again
    assert not again["Put NVIDIA's repository under the distribution's (apt pin)"].get("changed"), again
