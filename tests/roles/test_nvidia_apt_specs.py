"""The GPU roles' apt steps, run by Ansible's own apt module against a repository shaped like NVIDIA's.

No NVIDIA repository is reachable here, so stand-in .debs are built with dpkg-deb from the facts in
``nvidia_apt/standins.csv`` (each row names its public source): NVIDIA's real package names, version strings
(DCGM's epoch 1, the driver's own -0ubuntu1 revisions, NVLSM's date versions), several versions of each so
that every pin meets a newer candidate, the real Depends (gdrcopy -> gdrcopy-tests (= ver), nvlink5-580 ->
nvlsm and the fabric packages as ">= 580"), and GDRCopy's download folders with their real file names. The
repository is indexed with dpkg-scanpackages into a private apt tree that APT_CONFIG selects, with its own
dpkg status file for what a step finds installed; the host's packages are never touched.

Each test runs the role's own install task file (``include_role: tasks_from``) or its rendered variables
with ``ansible-playbook --check`` against localhost, through the host's /usr/bin/python3 and python3-apt
(host packages: dpkg-dev, python3-apt). apt -s then says which version each spec selects.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from playbook_json import ROOT, run_playbook, software

DATA = Path(__file__).parent / "nvidia_apt" / "standins.csv"
HOST_PYTHON = "/usr/bin/python3"
INSTALLED = "Status: install ok installed"


@dataclass
class AptWorld:
    """The private apt tree: its APT_CONFIG, dpkg status, and where the stand-ins are."""

    config: Path
    status: Path
    mirror: Path  # GDRCopy's download folders: <mirror>/CUDA 12.8/ubuntu22_04/x64/*.deb
    keyring: Path  # the folder holding the stand-in cuda-keyring_1.1-1_all.deb
    debs: dict[tuple[str, str], Path]

    def installed(self, *packages: tuple[str, str]) -> None:
        """Write the dpkg status: exactly these (package, version) installed, from their control files."""
        stanzas = []
        for key in packages:
            control = subprocess.run(
                ["dpkg-deb", "-f", str(self.debs[key])], check=True, capture_output=True, text=True
            ).stdout.strip()
            name, rest = control.split("\n", 1)
            stanzas.append(f"{name}\n{INSTALLED}\n{rest}\n")
        self.status.write_text("\n".join(stanzas))


def standins() -> list[dict[str, str]]:
    with DATA.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _build(root: Path, row: dict[str, str], out: Path) -> Path:
    name, version = row["package"], row["version"]
    (root / "DEBIAN").mkdir(parents=True)
    control = (
        f"Package: {name}\nVersion: {version}\nArchitecture: {row['architecture']}\n"
        "Maintainer: gpufleet test stand-in\n"
    )
    control += f"Depends: {row['depends']}\n" if row["depends"] else ""
    control += f"Description: stand-in for NVIDIA's {name} ({row['sources'][:60]})\n"
    (root / "DEBIAN" / "control").write_text(control)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)], check=True, capture_output=True
    )
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> AptWorld:
    missing = [tool for tool in ("dpkg-deb", "dpkg-scanpackages", "apt-get") if shutil.which(tool) is None]
    probe = subprocess.run([HOST_PYTHON, "-c", "import apt, apt_pkg"], capture_output=True, check=False)
    if missing or probe.returncode != 0 or os.geteuid() != 0:
        pytest.fail(
            f"needs root, dpkg-dev and python3-apt for {HOST_PYTHON} (missing: {missing or 'python3-apt'})"
        )
    work = tmp_path_factory.mktemp("nvidia-apt")
    repo, mirror, keyring = work / "repo", work / "mirror", work / "keyring"
    debs: dict[tuple[str, str], Path] = {}
    for index, row in enumerate(standins()):
        place = row["place"]
        if place in ("cuda-repo", "distro"):
            out = repo / f"{row['package']}_{row['version'].split(':')[-1]}_{row['architecture']}.deb"
        elif place == "keyring":
            out = keyring / f"{row['package']}_{row['version']}_{row['architecture']}.deb"
        else:  # a file in GDRCopy's download folders, at the path NVIDIA publishes it
            out = mirror / place
        debs[(row["package"], row["version"])] = _build(work / "build" / str(index), row, out)
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=repo, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    (repo / "Packages").write_text(packages)

    tree = work / "apt"
    folders = ("etc/apt/preferences.d", "etc/apt/apt.conf.d", "etc/apt/sources.list.d",
               "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/lib/dpkg")  # fmt: skip
    for folder in folders:
        (tree / folder).mkdir(parents=True, exist_ok=True)
    (tree / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    status = tree / "var/lib/dpkg/status"
    status.write_text("")
    config = work / "apt.conf"
    config.write_text(
        "\n".join(
            [
                f'Dir::State "{tree}/var/lib/apt";',
                f'Dir::State::status "{status}";',
                f'Dir::Cache "{tree}/var/cache/apt";',
                'Dir::Cache::pkgcache "";',
                'Dir::Cache::srcpkgcache "";',
                f'Dir::Etc "{tree}/etc/apt";',
                'Dir::Etc::sourcelist "sources.list";',
                'Dir::Etc::sourceparts "sources.list.d";',
                'Dir::Etc::preferences "preferences";',
                'Dir::Etc::preferencesparts "preferences.d";',
                'Dir::Etc::parts "apt.conf.d";',
                'Debug::NoLocking "true";',
                'APT::Architecture "amd64";',
                'APT::Architectures { "amd64"; };',
                "",
            ]
        )
    )
    subprocess.run(["apt-get", "update", "-q"], env={**os.environ, "APT_CONFIG": str(config)}, check=True,
                   capture_output=True, text=True)  # fmt: skip
    return AptWorld(config=config, status=status, mirror=mirror, keyring=keyring, debs=debs)


def _inventory(**host_vars: Any) -> dict[str, Any]:
    return {
        "all": {
            "hosts": {
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": HOST_PYTHON,
                    "gpufleet_software": software(),
                    **host_vars,
                }
            }
        }
    }


def _play(world: AptWorld, tasks: list[dict[str, Any]], gather_facts: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "name": "apt steps against the stand-in NVIDIA repository",
            "hosts": "localhost",
            "gather_facts": gather_facts,
            "environment": {"APT_CONFIG": str(world.config)},
            "tasks": tasks,
        }
    ]


def _include_role(role: str, tasks_from: str, os_vars: str | None = "Debian.yml") -> list[dict[str, Any]]:
    """The role's install task file, with the OS variables its main.yml would load first."""
    tasks: list[dict[str, Any]] = []
    if os_vars:
        tasks.append(
            {
                "name": "Load the OS's variables",
                "ansible.builtin.include_vars": str(ROOT / "roles" / role / "vars" / os_vars),
            }
        )
    tasks.append(
        {
            "name": f"Run {role} {tasks_from}",
            "ansible.builtin.include_role": {"name": role, "tasks_from": tasks_from},
        }
    )
    return tasks


def selected(result: dict[str, Any]) -> dict[str, str]:
    """What apt -s would install: package -> version, from the apt module's simulated output."""
    return dict(re.findall(r"^Inst (\S+) (?:\[\S+\] )?\((\S+) ", result.get("stdout", ""), re.MULTILINE))


def _extra(**values: Any) -> tuple[str, str]:
    return "-e", json.dumps(values)


# --- DCGM (gpu_health) -----------------------------------------------------------------------------------


def test_the_dcgm_spec_selects_the_pinned_version_beside_newer_dcgm_4(
    world: AptWorld, tmp_path: Path
) -> None:
    world.installed()
    rc, results = run_playbook(
        tmp_path, _inventory(gpufleet_software=software(cuda="12.9")),
        _play(world, _include_role("gpu_health", "install-Debian.yml"), gather_facts=False), "--check",
    )  # fmt: skip
    install = results["localhost"]["Install DCGM at the pinned version"]
    assert rc == 0 and not install.get("failed"), install.get("msg")
    assert selected(install) == {
        "datacenter-gpu-manager-4-core": "1:4.4.2-1",
        "datacenter-gpu-manager-4-cuda12": "1:4.4.2-1",
    }, install.get("stdout")


@pytest.mark.parametrize("spec", ["=*4.4.2-*", "=4.4.2*", "=4.4.2-*"])
def test_an_epochless_dcgm_spec_finds_no_candidate(world: AptWorld, tmp_path: Path, spec: str) -> None:
    """What the role rendered before (=*4.4.2-*) and its near variants: apt's own answer, not a guess."""
    world.installed()
    rc, results = run_playbook(
        tmp_path, _inventory(gpufleet_software=software(cuda="12.9")),
        _play(world, _include_role("gpu_health", "install-Debian.yml"), gather_facts=False), "--check",
        *_extra(__gpu_health_dcgm_spec=spec),
    )  # fmt: skip
    install = results["localhost"]["Install DCGM at the pinned version"]
    assert rc != 0 and install.get("failed"), install
    assert "no available installation candidate" in install["msg"], install["msg"]


# --- GDRCopy (gdrcopy) ---------------------------------------------------------------------------------

UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_version": "22.04", "architecture": "x86_64",
               "os_family": "Debian"}  # fmt: skip


def _gdrcopy_files(world: AptWorld, tmp_path: Path, pins: dict[str, str]) -> list[str]:
    """The URLs the role's "Install GDRCopy" loop hands apt, rendered by Ansible from the role's variables."""
    tasks = [
        {
            "name": "Load the role's defaults",
            "ansible.builtin.include_vars": str(ROOT / "roles/gdrcopy/defaults/main.yml"),
        },
        {
            "name": "Load the role's variables",
            "ansible.builtin.include_vars": str(ROOT / "roles/gdrcopy/vars/main.yml"),
        },
        {
            "name": "Load the OS's variables",
            "ansible.builtin.include_vars": str(ROOT / "roles/gdrcopy/vars/Debian.yml"),
        },
        {
            "name": "Render",
            "ansible.builtin.debug": {
                "msg": "{{ __gdrcopy_packages | map('regex_replace', '^', __gdrcopy_folder ~ '/') | list }}"
            },
        },
    ]
    rc, results = run_playbook(
        tmp_path, _inventory(gpufleet_fabric="efa"),
        _play(world, tasks, gather_facts=False),
        *_extra(ansible_facts=UBUNTU_2204, gdrcopy_url=f"file://{world.mirror}", **pins),
    )  # fmt: skip
    assert rc == 0, results
    return list(results["localhost"]["Render"]["msg"])


@pytest.mark.parametrize(
    ("pins", "folder", "version"),
    [
        ({}, "CUDA 13.0", "2.6"),  # the role's defaults: 2.6 from the CUDA 13.0 folder
        ({"gdrcopy_version": "2.5.1", "gdrcopy_cuda_version": "12.9"}, "CUDA 12.8", "2.5.1"),
        ({"gdrcopy_version": "2.5.1", "gdrcopy_cuda_version": "13.0"}, "CUDA 13.0", "2.5.1"),
    ],
)
def test_gdrcopy_installs_every_deb_the_meta_package_needs(
    world: AptWorld, tmp_path: Path, pins: dict[str, str], folder: str, version: str
) -> None:
    """Each .deb in the role's order, as dpkg would take them on a node: every step resolves against what the
    steps before it installed (marked installed in the private dpkg status), ending with the meta package."""
    files = _gdrcopy_files(world, tmp_path, pins)
    assert all(f"/CUDA%20{folder.split()[1]}/ubuntu22_04/x64/" in url for url in files), files
    installed: list[tuple[str, str]] = [("dkms", "3.0.10-8+deb12u1")]  # the gdrcopy role's prerequisite
    for url in files:
        world.installed(*installed)
        step = tmp_path / f"step-{len(installed)}"
        step.mkdir()
        install = [{"name": "Install", "ansible.builtin.apt": {"deb": url}}]
        rc, results = run_playbook(step, _inventory(), _play(world, install, False), "--check")
        result = results["localhost"]["Install"]
        assert rc == 0 and not result.get("failed"), f"{url}: {result.get('msg')}"
        name = Path(url).name.split("_")[0]
        installed.append((name, f"{version}-1"))
    assert [name for name, _ in installed[1:]] == ["gdrdrv-dkms", "libgdrapi", "gdrcopy-tests", "gdrcopy"]


# --- NVLSM and the fabric manager (nvidia_driver) -----------------------------------------------------------

DRIVER_580_95 = [
    ("nvidia-driver-pinning-580", "580.95.05-1"),
    ("nvidia-open", "580.95.05-1"),
    ("libnvidia-compute-580", "580.95.05-0ubuntu1"),
    ("nvidia-dkms-580-open", "580.95.05-0ubuntu1"),
]
NVIDIA_DRIVER_STANDIN = {
    "nvidia_driver_add_repo": False,  # the stand-in tree is the repository
    "__nvidia_driver_build_packages": [],  # no kernel headers to install for a check
}


def _driver_install(world: AptWorld, tmp_path: Path, **host_vars: Any) -> dict[str, dict[str, Any]]:
    world.installed(*DRIVER_580_95)  # the driver role's first run installed 580.95.05; 580.105.08 is newer
    rc, results = run_playbook(
        tmp_path,
        _inventory(gpufleet_gpu_stack="install", gpufleet_software=software(nvidia_driver="580"),
                   **host_vars),
        _play(world, _include_role("nvidia_driver", "install-Debian.yml")), "--check",
        *_extra(**NVIDIA_DRIVER_STANDIN),
    )  # fmt: skip
    assert rc == 0, json.dumps(results, indent=1)[-3000:]
    return results["localhost"]


def test_b200_gets_nvlsm_and_the_fabric_packages_at_the_drivers_version(
    world: AptWorld, tmp_path: Path
) -> None:
    tasks = _driver_install(
        world, tmp_path, gpufleet_gpus=8, gpufleet_nvswitch=True, gpufleet_gpu_arch="sm_100"
    )
    fm = tasks["Install nvidia-fabricmanager at exactly the driver's version"]
    assert selected(fm) == {"nvidia-fabricmanager": "580.95.05-1"}, fm.get("stdout")
    nvlsm = tasks["Install NVLSM (nvlink5) with the fabric packages at exactly the driver's version"]
    assert not nvlsm.get("failed"), nvlsm.get("msg")
    chosen = selected(nvlsm)
    for package in ("nvlink5-580", "libnvidia-nscq", "libnvsdm", "nvidia-imex", "nvidia-fabricmanager"):
        # nvlink5-580 asks for these only as ">= 580": a newer 580.105.08 must not slip in
        assert chosen.get(package) == "580.95.05-1", (package, nvlsm.get("stdout"))
    assert chosen.get("nvlsm", "").startswith("2025.10."), nvlsm.get("stdout")  # date-versioned, the newest
    assert {"libibumad3", "infiniband-diags"} <= set(chosen), nvlsm.get("stdout")


@pytest.mark.parametrize(
    ("gpus", "arch"),
    [(8, "sm_90"), (4, "sm_100")],  # HGX H100 (third-generation NVSwitch); GB200 NVL72 compute tray
    ids=["h100", "gb200-tray"],
)
def test_no_nvlsm_where_the_nvswitch_is_not_fourth_generation_hgx(
    world: AptWorld, tmp_path: Path, gpus: int, arch: str
) -> None:
    tasks = _driver_install(
        world, tmp_path, gpufleet_gpus=gpus, gpufleet_nvswitch=True, gpufleet_gpu_arch=arch
    )
    assert selected(tasks["Install nvidia-fabricmanager at exactly the driver's version"]) == {
        "nvidia-fabricmanager": "580.95.05-1"
    }
    assert tasks["Install NVLSM (nvlink5) with the fabric packages at exactly the driver's version"].get(
        "skipped"
    )


def test_a_branch_pin_holds_every_package_at_the_drivers_version(world: AptWorld, tmp_path: Path) -> None:
    """Holding the nvidia-open metapackage alone lets libnvidia-compute-580 & co. move within 580 while the
    fabric manager stays held; the hold takes every installed package of the driver's exact version."""
    tasks = _driver_install(
        world, tmp_path, gpufleet_gpus=8, gpufleet_nvswitch=True, gpufleet_gpu_arch="sm_100"
    )
    held = {item["item"] for item in tasks["Hold the driver packages against upgrades"]["results"]}
    assert held == {
        "nvidia-driver-pinning-580", "nvidia-open", "libnvidia-compute-580", "nvidia-dkms-580-open",
        "nvidia-fabricmanager", "nvlink5-580",
    }, held  # fmt: skip


# --- cuda_toolkit: a new keyring updates the package lists --------------------------------------------------


def test_a_changed_keyring_updates_a_fresh_package_list(world: AptWorld, tmp_path: Path) -> None:
    """The lists were read moments ago (the fixture's apt-get update), so cache_valid_time alone would skip
    the update that the new repository needs; the role updates them because the keyring changed."""
    world.installed()
    rc, results = run_playbook(
        tmp_path, _inventory(gpufleet_software=software(cuda="12.9")),
        _play(world, _include_role("cuda_toolkit", "install-repo-Debian.yml")), "--check",
        *_extra(__cuda_toolkit_repo=str(world.keyring)),
    )  # fmt: skip
    tasks = results["localhost"]
    assert tasks["Add NVIDIA's CUDA repository (cuda-keyring)"].get("changed"), tasks
    install = tasks["Install the pinned toolkit"]
    assert rc == 0 and install.get("cache_updated") is True, install
    assert selected(install) == {"cuda-toolkit-12-9": "12.9.1-1"}, install.get("stdout")


# --- the NVIDIA Container Toolkit: one role, four packages, one version ------------------------------------

TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1"]  # fmt: skip


def test_one_role_installs_the_container_toolkit_and_always_all_four():
    """Before, the containers role installed libnvidia-container-tools alone and unpinned (the repository's
    newest) and gcp_gpudirect later asked for all four at 1.20.0-1: apt refused the downgrade (issue 31, N6).
    Now every apt task of every role that names a toolkit package, through any variable, is the
    container_toolkit role's, and it names all four."""
    holders = {}  # variable -> role, for every defaults/vars entry whose value names a toolkit package
    for path in sorted((ROOT / "roles").glob("*/*/main.yml")) + sorted((ROOT / "roles").glob("*/vars/*.yml")):
        if path.parent.name not in ("defaults", "vars"):
            continue
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            if any(package in json.dumps(value) for package in TOOLKIT):
                holders[name] = path.parts[-3]
    installers = []
    for path in sorted((ROOT / "roles").glob("*/tasks/*.yml")):
        text = path.read_text()
        for task in re.split(r"\n(?=- name:|    - name:)", text):
            if "ansible.builtin.apt:" not in task:
                continue
            named = [v for v in holders if re.search(rf"\b{re.escape(v)}\b", task)]
            literal = [p for p in TOOLKIT if re.search(rf"\b{re.escape(p)}\b", task)]
            if named or literal:
                installers.append((path.relative_to(ROOT / "roles").as_posix(), named, literal))
    assert installers == [
        ("container_toolkit/tasks/install-Debian.yml", ["__container_toolkit_packages"], [])
    ], installers
    packages = yaml.safe_load((ROOT / "roles" / "container_toolkit" / "vars" / "main.yml").read_text())
    assert packages["__container_toolkit_packages"] == TOOLKIT


def _toolkit(world: AptWorld, tmp_path: Path, *installed: tuple[str, str]) -> tuple[int, dict[str, dict]]:
    """The container_toolkit role against the stand-in repository (1.20.0-1 and 1.20.1-1 of the four), the
    node's dpkg status holding ``installed``; dpkg-query reads the same status (a stand-in that passes
    --admindir)."""
    world.installed(*installed)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text(
        f'#!/bin/sh\nexec /usr/bin/dpkg-query --admindir={world.status.parent} "$@"\n'
    )
    (bin_dir / "dpkg-query").chmod(0o755)
    play = _play(world, [{"name": "Toolkit", "ansible.builtin.include_role": {"name": "container_toolkit"}}],
                 gather_facts=False)  # fmt: skip
    play[0]["environment"]["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    inventory = _inventory(gpufleet_gpus=8, gpufleet_gpu_components={"container_toolkit": "install"})
    rc, results = run_playbook(
        tmp_path, inventory, play, "--check", *_extra(container_toolkit_add_repo=False)
    )
    return rc, results["localhost"]


INSTALL = "Install the NVIDIA Container Toolkit's four packages at the pinned version"


def test_the_container_toolkit_installs_all_four_packages_at_the_pin(world: AptWorld, tmp_path: Path) -> None:
    """Beside a newer release: the toolkit asks for its libraries only as ">= version", so every one of the
    four packages is named at the pin (NVIDIA's guide), in one transaction."""
    rc, results = _toolkit(world, tmp_path)
    install = results[INSTALL]
    assert rc == 0 and not install.get("failed"), install.get("msg")
    assert selected(install) == dict.fromkeys(TOOLKIT, "1.20.0-1"), install.get("stdout")


def test_a_node_with_a_newer_toolkit_keeps_it(world: AptWorld, tmp_path: Path) -> None:
    """The four at 1.20.1-1 (the DLAMI's release): never downgraded, verified."""
    rc, results = _toolkit(world, tmp_path, *[(p, "1.20.1-1") for p in TOOLKIT])
    assert rc == 0, {n: r.get("msg") for n, r in results.items() if r.get("failed")}
    assert INSTALL not in results and results["Install the four packages at the pin"].get("skipped"), results
    assert "Assert that the four packages are there at one version, the pin or newer" in results
    assert (
        results["Verify what the node has, install what it lacks"]["ansible_facts"][
            "container_toolkit_mode"
        ].strip()
        == "verify"
    )


def test_a_node_with_one_package_newer_than_the_pin_stops_before_apt(world: AptWorld, tmp_path: Path) -> None:
    """What the old containers role left (libnvidia-container-tools alone, the repository's newest): the role
    names it instead of letting apt refuse a downgrade half-way."""
    rc, results = _toolkit(
        world, tmp_path, ("libnvidia-container-tools", "1.20.1-1"), ("libnvidia-container1", "1.20.1-1")
    )
    assert rc != 0
    check = results[
        "Assert that no package of the four is already newer than the pin (apt would refuse the downgrade)"
    ]
    assert "libnvidia-container-tools 1.20.1-1" in check["msg"] and "never downgrades" in check["msg"], check[
        "msg"
    ]
    assert INSTALL not in results
