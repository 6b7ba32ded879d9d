"""The GPU roles take their mode per component from the inventory (gpufleet_gpu_components, from the image
manifest the node boots), falling back to gpufleet_gpu_stack; NCCL verify finds the DLAMI's libnccl.so.2 in
its CUDA tree; verify mode turns persistence mode on over the image's driver. Run by Ansible on this
machine (connection local), against a DLAMI-shaped tree and stand-in commands, never a real GPU."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook, software

from gpufleet.catalog.images import component_modes, component_paths, load_image_manifests

MODE_VARS = {
    "driver": "nvidia_driver_mode",
    "cuda": "cuda_toolkit_mode",
    "nccl": "nccl_mode",
    "dcgm": "gpu_health_mode",
    "nccl_tests": "nccl_tests_mode",
}
ROLES = ("nvidia_driver", "cuda_toolkit", "nccl", "gpu_health", "nccl_tests")


def _modes(tmp_path: Path, host_vars: dict) -> dict[str, str]:
    play = [
        {
            "name": "Render the roles' modes",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Load the defaults",
                    "ansible.builtin.include_vars": {"file": "{{ item }}"},
                    "loop": [str(ROOT / "roles" / role / "defaults" / "main.yml") for role in ROLES],
                },
                {
                    "name": "Show the modes",
                    "ansible.builtin.debug": {
                        "msg": {key: "{{ " + var + " | trim }}" for key, var in MODE_VARS.items()}
                    },
                },
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    **host_vars,
                }
            }
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc == 0, results
    return results["node"]["Show the modes"]["msg"]


def test_the_gcp_accelerator_image_verifies_the_driver_and_installs_cuda_nccl_dcgm(tmp_path):
    image = load_image_manifests().images["gcp-ubuntu-accelerator-2404-nvidia-580"]
    host = {
        "gpufleet_gpus": 8,
        "gpufleet_gpu_stack": "verify",
        "gpufleet_gpu_components": component_modes(image),
    }
    assert _modes(tmp_path, host) == {
        "driver": "verify",
        "cuda": "install",
        "nccl": "install",
        "dcgm": "install",
        "nccl_tests": "install",
    }


@pytest.mark.parametrize("stack", ["install", "verify", "none"])
def test_a_bare_metal_inventory_without_components_keeps_gpu_stack(tmp_path, stack):
    modes = _modes(tmp_path, {"gpufleet_gpus": 8, "gpufleet_gpu_stack": stack})
    assert set(modes.values()) == {stack}, modes


def _dlami_tree(root: Path) -> Path:
    """The DLAMI's layout: several CUDA trees side by side, /usr/local/cuda a link to the default one, NCCL
    in each tree's include/ and lib/ (libnccl.so -> libnccl.so.2 -> libnccl.so.2.<x.y.z>), none of it on
    the linker cache. The versions are the vendor's shape, not the DLAMI's (not published)."""
    for cuda, nccl in (("12.9", (2, 26, 2)), ("13.2", (2, 28, 9))):
        home = root / "usr" / "local" / f"cuda-{cuda}"
        (home / "include").mkdir(parents=True)
        (home / "lib").mkdir()
        major, minor, patch = nccl
        (home / "include" / "nccl.h").write_text(
            f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
            f'#define NCCL_SUFFIX ""\n#define NCCL_VERSION_CODE {major * 10000 + minor * 100 + patch}\n'
        )
        real = home / "lib" / f"libnccl.so.{major}.{minor}.{patch}"
        real.write_bytes(b"\x7fELF")
        (home / "lib" / "libnccl.so.2").symlink_to(real.name)
        (home / "lib" / "libnccl.so").symlink_to("libnccl.so.2")
    (root / "usr" / "local" / "cuda").symlink_to("cuda-13.2")
    return root / "usr" / "local" / "cuda-13.2"


def _stand_in_ldconfig(bin_dir: Path) -> None:
    """ldconfig -p as on the DLAMI: the system's libraries, no libnccl.so.2; plain ldconfig does nothing."""
    bin_dir.mkdir()
    script = bin_dir / "ldconfig"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-p" ]; then\n'
        "  echo '2 libs found in cache `/etc/ld.so.cache'\"'\"\n"
        "  echo '\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1'\n"
        "  echo '\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6'\n"
        "fi\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _verify_nccl(tmp_path: Path, gpu_paths: dict[str, str]) -> tuple[int, dict[str, dict]]:
    _stand_in_ldconfig(tmp_path / "bin")
    etc = tmp_path / "etc"
    etc.mkdir()
    play = [
        {
            "name": "Verify the image's NCCL",
            "hosts": "all",
            "gather_facts": False,
            "environment": {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
            "tasks": [
                {
                    "name": "NCCL verify",
                    "ansible.builtin.include_role": {"name": "nccl", "tasks_from": "verify.yml"},
                }
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_gpus": 8,
                    "gpufleet_gpu_stack": "verify",
                    "gpufleet_gpu_components": {"nccl": "verify"},
                    "gpufleet_gpu_paths": gpu_paths,
                    "gpufleet_software": software(nccl="2.27.7"),
                    "nccl_env_file": str(etc / "nccl-home.env"),
                }
            }
        }
    }
    extra = f"__nccl_ld_conf={etc / 'gpufleet-nccl.conf'} __nccl_profile={etc / 'gpufleet-nccl.sh'}"
    rc, results = run_playbook(tmp_path, inventory, play, "-e", extra)
    return rc, results.get("node", {})


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes its files owned by root")
def test_nccl_verify_finds_the_dlami_library_in_its_cuda_tree_and_adds_it_to_the_linker(tmp_path):
    image = load_image_manifests().images["dlami-base-oss-ubuntu-24.04-arm64"]
    tree = _dlami_tree(tmp_path / "image")
    # The manifest's paths, moved under the test tree (the same layout).
    paths = {
        k: str(tmp_path / "image") + v for k, v in component_paths(image).items() if k.startswith("nccl")
    }
    assert paths["nccl_lib_dir"] == str(tree / "lib")
    rc, results = _verify_nccl(tmp_path, paths)
    failed = {name: r.get("msg") for name, r in results.items() if r.get("failed")}
    assert rc == 0, failed
    env = dict(
        line.split("=", 1) for line in (tmp_path / "etc" / "nccl-home.env").read_text().splitlines()[2:]
    )
    assert env["NCCL_HOME"] == str(tree), env
    assert env["NCCL_LIB_DIR"] == str(tree / "lib"), env
    assert env["NCCL_VERSION"] == "2.28.9" and env["NCCL_SOURCE"] == "image", env
    assert (tmp_path / "etc" / "gpufleet-nccl.conf").read_text() == f"{tree / 'lib'}\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the role writes its files owned by root")
def test_nccl_verify_without_the_manifest_path_says_the_linker_does_not_know_it(tmp_path):
    _dlami_tree(tmp_path / "image")
    rc, results = _verify_nccl(
        tmp_path, {"nccl_home": str(tmp_path / "image" / "usr" / "local" / "cuda-13.2")}
    )
    assert rc != 0
    message = results["Assert that NCCL is there, found by the linker, at the pinned version or newer"]["msg"]
    assert "libnccl.so.2 unknown to the dynamic linker (ldconfig -p)" in message, message


def _repo_dir() -> str:
    """NVIDIA's folder for this machine's OS and architecture (debian12/x86_64), as vars/Debian.yml."""
    release = dict(
        line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
    )
    distro, version = release["ID"].strip('"'), release["VERSION_ID"].strip('"')
    version = version.replace(".", "") if distro == "ubuntu" else version.split(".")[0]
    return f"{distro}{version}/{os.uname().machine.replace('aarch64', 'sbsa')}"


def _stand_in_repository(tmp_path: Path, image_source: bool) -> tuple[str, Path]:
    """A file:// stand-in of NVIDIA's repository holding a cuda-keyring .deb (built with dpkg-deb), and the
    node's apt sources: with or without an entry for NVIDIA's CUDA repository."""
    repos = tmp_path / "cuda" / "repos"
    package = tmp_path / "keyring-pkg"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\nMaintainer: stand-in <none@example.com>\n"
        "Description: stand-in of NVIDIA's cuda-keyring\n"
    )
    (repos / _repo_dir()).mkdir(parents=True)
    built = subprocess.run(
        ["dpkg-deb", "--build", str(package), str(repos / _repo_dir() / "cuda-keyring_1.1-1_all.deb")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    sources = tmp_path / "apt" / "sources.list.d"
    sources.mkdir(parents=True)
    (tmp_path / "apt" / "sources.list").write_text(
        "deb http://deb.debian.org/debian bookworm main\n"
        f"# deb https://developer.download.nvidia.com/compute/cuda/repos/{_repo_dir()}/ /\n"
    )
    if image_source:
        (sources / "cuda.sources").write_text(
            "Types: deb\n"
            f"URIs: https://developer.download.nvidia.com/compute/cuda/repos/{_repo_dir()}/\n"
            "Suites: /\nSigned-By: /usr/share/keyrings/image-nvidia.gpg\n"
        )
    return f"file://{repos}", tmp_path / "apt"


def _verify_driver(tmp_path: Path, unit: str, image_source: bool = True) -> dict[str, dict]:
    """The nvidia_driver role in verify mode under --check, with a stand-in systemctl that reports the
    nvidia-persistenced unit's LoadState (``loaded``, or ``not-found`` on an image without it), and apt
    sources that name NVIDIA's CUDA repository (``image_source``) or do not."""
    repo_url, apt = _stand_in_repository(tmp_path, image_source)
    check = tmp_path / "node_check.py"
    check.write_text("import sys\nprint('ok: 8 GPUs, driver 580.95.05, persistence on')\nsys.exit(0)\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho {unit}\n")
    (bin_dir / "systemctl").chmod(0o755)
    dropin = tmp_path / "etc" / "nvidia-persistenced.service.d" / "gpufleet.conf"
    play = [
        {
            "name": "GPU node",
            "hosts": "all",
            "gather_facts": True,
            "environment": {"PATH": f"{bin_dir}:{os.environ['PATH']}"},
            "roles": [{"role": "nvidia_driver"}],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_gpus": 8,
                    "gpufleet_gpu_stack": "verify",
                    "gpufleet_software": software(),
                    "gpufleet_gpu_components": {"driver": "verify", "persistence_mode": "install"},
                    "nvidia_driver_check_script": str(check),
                    "nvidia_driver_repo_url": repo_url,
                }
            }
        }
    }
    extra = {
        "__nvidia_driver_persistenced_dropin": str(dropin),
        "__nvidia_driver_apt_sources": [str(apt / "sources.list"), str(apt / "sources.list.d")],
    }
    rc, results = run_playbook(tmp_path, inventory, play, "--check", "--diff", "-e", json.dumps(extra))
    failed = {name: r.get("msg") for name, r in results.get("node", {}).items() if r.get("failed")}
    assert rc == 0, failed
    return results["node"]


def test_verify_mode_turns_persistence_mode_on_instead_of_failing(tmp_path):
    """Over the image's driver (Google's image boots with persistence mode off), verify mode writes the same
    nvidia-persistenced drop-in as install mode, then runs the node check (a stand-in that passes here)."""
    node = _verify_driver(tmp_path, "loaded")
    assert node["Install the driver"].get("skipped", True), "verify mode installed the driver"
    written = node["Start nvidia-persistenced with persistence mode on"]
    assert written.get("changed") and not written.get("skipped"), written
    after = written["diff"][0]["after"] if isinstance(written["diff"], list) else written["diff"]["after"]
    assert "ExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode --verbose" in after, after
    assert not node["Assert that the node meets the pin and the inventory"].get("failed")
    # The image's apt sources name NVIDIA's CUDA repository: kept, no keyring added over it.
    assert node["Add NVIDIA's CUDA repository the image lacks (cuda-keyring)"].get("skipped"), node
    said = node["Say where the image's apt sources name NVIDIA's CUDA repository"]["msg"]
    assert "cuda.sources" in said and "keeps it" in said, said


def test_verify_mode_on_an_image_without_the_persistenced_unit_leaves_it_to_the_node_check(tmp_path):
    """An image whose driver brings no nvidia-persistenced unit (how the DLAMI installs its driver is not
    published: issue 31, M5): no drop-in for a unit that is not there, no restart of it, a line that says so;
    the node check judges persistence mode."""
    node = _verify_driver(tmp_path, "not-found")
    assert node["Start nvidia-persistenced with persistence mode on"].get("skipped"), node
    assert node["Restart nvidia-persistenced with the drop-in, and enable it at boot"].get("skipped")
    said = node["Say that the image has no nvidia-persistenced unit"]
    assert "no nvidia-persistenced unit" in said["msg"], said
    assert not node["Assert that the node meets the pin and the inventory"].get("failed")


def test_verify_mode_adds_nvidias_cuda_repository_where_the_image_lacks_it(tmp_path):
    """The DLAMI ships the driver and CUDA, so no install-mode role adds NVIDIA's repository, yet DCGM, NCCL
    and dcgm-exporter are installed from it by name: verify mode adds it through cuda-keyring where no apt
    source names it (a commented line does not count) and reads the package lists. Where the image names it,
    the role keeps it (the persistence test above, whose apt sources carry NVIDIA's entry)."""
    node = _verify_driver(tmp_path, "loaded", image_source=False)
    add = node["Add NVIDIA's CUDA repository the image lacks (cuda-keyring)"]
    assert add.get("changed") and not add.get("skipped"), add  # under --check: would install it
    update = node["Read NVIDIA's package lists"]
    assert not update.get("skipped"), update


def test_facts_are_read_again_after_the_drivers_reboot():
    """The reboot may boot a newer kernel (issue 31, M4): the task after it gathers the kernel again, when it
    rebooted, before later roles build modules for ansible_facts['kernel']."""
    tasks = yaml.safe_load((ROOT / "roles" / "nvidia_driver" / "tasks" / "reboot.yml").read_text())
    names = [task["name"] for task in tasks]
    reboot = names.index("Reboot to load the new kernel module")
    regather = tasks[reboot + 1]
    assert "ansible.builtin.setup" in regather, regather
    assert "min" in regather["ansible.builtin.setup"]["gather_subset"]
    assert regather["when"] == tasks[reboot]["when"], regather  # exactly when the reboot ran


def _detect(tmp_path: Path, role: str, host_vars: dict, stand_ins: dict[str, str]) -> dict[str, dict]:
    """The role's detect step alone (tasks/detect.yml), with stand-in commands first on PATH."""
    bin_dir = tmp_path / "detect-bin"
    bin_dir.mkdir()
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    play = [
        {
            "name": "Detect",
            "hosts": "all",
            "gather_facts": False,
            "environment": {"PATH": f"{bin_dir}:{os.environ['PATH']}"},
            "tasks": [
                {"name": "Detect", "ansible.builtin.include_role": {"name": role, "tasks_from": "detect.yml"}}
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    **host_vars,
                }
            }
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc == 0, results
    return results["node"]["Verify what the image ships, install what it lacks"]["ansible_facts"]


EMPTY_LDCONFIG = "#!/bin/sh\necho '1 libs found in cache'\n"


@pytest.mark.parametrize("ships", [True, False])
def test_nccl_detect_finds_the_dlami_library_off_the_linker_cache(tmp_path, ships):
    """The x86_64 DLAMI's NCCL is not settled by any x86_64 page (issue 31, item 5): the role looks in the
    CUDA trees, and where it finds NCCL off the linker cache it verifies it there."""
    homes = [str(tmp_path / "image" / "usr" / "local" / "cuda"), "/nonexistent/usr"]
    if ships:
        _dlami_tree(tmp_path / "image")
    facts = _detect(tmp_path, "nccl", {"nccl_verify_homes": homes}, {"ldconfig": EMPTY_LDCONFIG})
    assert facts["nccl_mode"].strip() == ("verify" if ships else "install"), facts
    if ships:
        assert facts["nccl_verify_lib_dir"].strip() == f"{homes[0]}/lib", facts


@pytest.mark.parametrize("ships", [True, False])
def test_cuda_detect_verifies_the_images_nvcc(tmp_path, ships):
    home = tmp_path / "cuda"
    if ships:
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    facts = _detect(tmp_path, "cuda_toolkit", {"cuda_toolkit_verify_home": str(home)}, {})
    assert facts["cuda_toolkit_mode"] == ("verify" if ships else "install"), facts


@pytest.mark.parametrize("status", ["install ok installed", None])
def test_dcgm_detect_verifies_the_images_dcgm(tmp_path, status):
    answer = f'printf "%s" "{status}"' if status else "echo 'no packages found' >&2; exit 1"
    facts = _detect(tmp_path, "gpu_health", {}, {"dpkg-query": f"#!/bin/sh\n{answer}\n"})
    assert facts["gpu_health_mode"] == ("verify" if status else "install"), facts


def test_the_x86_64_dlami_detects_cuda_nccl_and_dcgm(tmp_path):
    image = load_image_manifests().images["dlami-base-oss-ubuntu-22.04"]
    host = {
        "gpufleet_gpus": 8,
        "gpufleet_gpu_stack": "verify",
        "gpufleet_gpu_components": component_modes(image),
    }
    assert _modes(tmp_path, host) == {
        "driver": "verify",
        "cuda": "detect",
        "nccl": "detect",
        "dcgm": "detect",
        "nccl_tests": "detect",
    }
