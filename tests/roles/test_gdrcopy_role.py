"""GDRCopy is its own component (issue 24): the gdrcopy role takes its mode from the inventory's
gpufleet_gpu_components.gdrcopy (the image manifest), whatever NCCL's mode, on the fabrics that use it, and
verify mode checks what the image ships: the gdrdrv module loaded, libgdrapi.so.2 known to the linker, a
test program there, the packaged version at least the pin. Run by Ansible on this machine (connection
local) against stand-in commands and folders, never a real GPU or kernel module."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

from gpufleet.catalog.images import component_modes, load_image_manifests

ROLE_DEFAULTS = [ROOT / "roles" / role / "defaults" / "main.yml" for role in ("nccl", "gdrcopy")]


def _host(**host_vars: object) -> dict:
    return {
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


def _modes(tmp_path: Path, **host_vars: object) -> dict[str, str]:
    play = [
        {
            "name": "Render the modes",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Load the defaults",
                    "ansible.builtin.include_vars": {"file": "{{ item }}"},
                    "loop": [str(path) for path in ROLE_DEFAULTS],
                },
                {
                    "name": "Show",
                    "ansible.builtin.debug": {
                        "msg": {"nccl": "{{ nccl_mode | trim }}", "gdrcopy": "{{ gdrcopy_mode | trim }}"}
                    },
                },
            ],
        }
    ]
    rc, results = run_playbook(tmp_path, _host(**host_vars), play)
    assert rc == 0, results
    return results["node"]["Show"]["msg"]


@pytest.mark.parametrize(
    ("image", "fabric", "expected"),
    [
        # The ARM64 24.04 DLAMI: NCCL is the image's (verify), GDRCopy is not shipped: installed all the same.
        ("dlami-base-oss-ubuntu-24.04-arm64", "efa", {"nccl": "verify", "gdrcopy": "install"}),
        # The ARM64 22.04 DLAMI lists GDRCopy 2.5.2: verified, never installed over.
        ("dlami-base-oss-ubuntu-22.04-arm64", "efa", {"nccl": "verify", "gdrcopy": "verify"}),
        # The x86_64 24.04 DLAMI lists GDRCopy 2.6 on its own page (issue 31, N2); its NCCL is not settled.
        ("dlami-base-oss-ubuntu-24.04", "efa", {"nccl": "detect", "gdrcopy": "verify"}),
        # The x86_64 22.04 DLAMI: no x86_64 page read, so the role finds GDRCopy out on the node.
        ("dlami-base-oss-ubuntu-22.04", "efa", {"nccl": "detect", "gdrcopy": "detect"}),
        # A fabric without GPUDirect RDMA has no use for it.
        ("ubuntu-24.04", "ethernet", {"nccl": "install", "gdrcopy": "none"}),
        ("gcp-ubuntu-accelerator-2404-nvidia-580", "tcpxo", {"nccl": "install", "gdrcopy": "none"}),
    ],
)
def test_gdrcopy_takes_its_own_mode_from_the_image_manifest(tmp_path, image, fabric, expected):
    manifest = load_image_manifests().images[image]
    modes = _modes(
        tmp_path,
        gpufleet_gpus=8,
        gpufleet_gpu_stack="verify",
        gpufleet_fabric=fabric,
        gpufleet_gpu_components=component_modes(manifest),
    )
    assert modes == expected


def test_an_inventory_without_components_keeps_gpu_stack_on_an_rdma_fabric(tmp_path):
    modes = _modes(tmp_path, gpufleet_gpus=8, gpufleet_gpu_stack="verify", gpufleet_fabric="infiniband")
    assert modes["gdrcopy"] == "verify"


def test_the_gpu_play_runs_gdrcopy_after_the_driver_on_gpu_nodes():
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    play = next(p for p in site if p["name"] == "GPU node stack")
    names = [role["role"] for role in play["roles"]]
    assert names.index("nvidia_driver") < names.index("gdrcopy"), names
    entry = play["roles"][names.index("gdrcopy")]
    assert entry.get("when") == "__site_has_gpus | bool", entry


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _verify(
    tmp_path: Path,
    *,
    loaded: bool,
    programs: tuple[str, ...],
    packaged: str | None,
    tags: str = "all",
    image: str = "dlami-base-oss-ubuntu-22.04-arm64",
) -> tuple[int, dict[str, dict]]:
    """The role in verify mode on an ARM64 DLAMI 22.04 node (whose page lists GDRCopy): stand-in ldconfig
    (libgdrapi.so.2 in its cache, as
    libgdrapi's package leaves it) and dpkg-query, the module's sysfs folder and the programs' folder in
    the test tree."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(
        bin_dir / "ldconfig",
        "#!/bin/sh\n"
        "echo '2 libs found in cache `/etc/ld.so.cache'\"'\"\n"
        "echo '\tlibgdrapi.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libgdrapi.so.2'\n"
        "echo '\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6'\n",
    )
    answer = f"printf '%s' '{packaged}'" if packaged else "echo 'dpkg-query: no packages found' >&2; exit 1"
    _executable(bin_dir / "dpkg-query", f"#!/bin/sh\n{answer}\n")
    module = tmp_path / "sys" / "module" / "gdrdrv"
    if loaded:
        module.mkdir(parents=True)
    programs_dir = tmp_path / "usr" / "bin"
    programs_dir.mkdir(parents=True)
    for name in programs:
        _executable(programs_dir / name, "#!/bin/sh\n")
    manifest = load_image_manifests().images[image]
    inventory = _host(
        gpufleet_gpus=8,
        gpufleet_gpu_stack="verify",
        gpufleet_fabric="efa",
        gpufleet_gpu_components=component_modes(manifest),
    )
    play = [
        {
            "name": "GDRCopy",
            "hosts": "all",
            "gather_facts": False,
            "environment": {"PATH": f"{bin_dir}:/usr/bin:/bin"},
            "roles": [{"role": "gdrcopy"}],
        }
    ]
    extra = {"__gdrcopy_module_dir": str(module), "__gdrcopy_bin_dirs": [str(programs_dir)]}
    rc, results = run_playbook(tmp_path, inventory, play, "-e", json.dumps(extra), "--tags", tags)
    return rc, results.get("node", {})


CHECK = "Assert that GDRCopy is there, loaded and at the pinned version or newer"


def test_verify_passes_on_an_image_that_ships_gdrcopy(tmp_path):
    rc, results = _verify(tmp_path, loaded=True, programs=("gdrcopy_sanity",), packaged="2.5.2-1")
    failed = {name: r.get("msg") for name, r in results.items() if r.get("failed")}
    assert rc == 0 and not failed, failed
    assert results["Install NVIDIA's GDRCopy packages"].get("skipped"), "verify mode installed GDRCopy"
    assert not results[CHECK].get("skipped"), results[CHECK]


def test_verify_names_what_is_missing_and_the_fix(tmp_path):
    rc, results = _verify(tmp_path, loaded=False, programs=(), packaged="2.4.4-1")
    assert rc != 0
    message = " ".join(results[CHECK]["msg"].split())
    assert "gdrdrv module not loaded (no " in message, message
    assert "libgdrapi.so.2 known to the dynamic linker" in message, message
    assert "test programs: none of gdrcopy_sanity, gdrcopy_copybw in " in message, message
    assert "packaged version: 2.4.4, needed at least 2.5.2" in message, message
    assert "systemctl start gdrdrv" in message and "gdrcopy_mode: none" in message, message


def test_a_bake_leaves_the_runtime_checks_to_configure(tmp_path):
    """A bake runs --tags install, maybe on a builder without a GPU (no nvidia module, so no gdrdrv): the
    module's loading and the checks are configure's, as the driver's verify step is."""
    rc, results = _verify(tmp_path, loaded=False, programs=(), packaged=None, tags="install")
    failed = {name: r.get("msg") for name, r in results.items() if r.get("failed")}
    assert rc == 0 and not failed, failed
    assert CHECK not in results, "the bake ran the runtime checks"


@pytest.mark.parametrize(("provider", "expected"), [("gcp", "none"), ("baremetal", "install")])
def test_googles_roce_gets_no_gdrcopy(tmp_path, provider, expected):
    """Google's RoCE (gIB, A3 Ultra and A4) gets no GDRCopy, as Cluster Toolkit installs none (issue 31, N2);
    RoCE elsewhere (ConnectX on bare metal) keeps it."""
    modes = _modes(
        tmp_path,
        gpufleet_gpus=8,
        gpufleet_gpu_stack="install",
        gpufleet_fabric="roce",
        gpufleet_provider=provider,
    )
    assert modes["gdrcopy"] == expected


KERNEL_CHECK = "Assert that this GDRCopy's module builds on the node's kernel"


@pytest.mark.parametrize(("version", "builds"), [(None, True), ("2.5.1", False), ("2.5.2", True)])
def test_install_refuses_a_gdrcopy_whose_module_does_not_build_on_the_nodes_kernel(tmp_path, version, builds):
    """Kernels >= 6.15 (Google's accelerator image 6.17, the DLAMI 24.04 7.0) need GDRCopy >= 2.5.2 (its
    CHANGELOG): the default pin builds there, an older pin stops before apt with the reason (issue 31, N2)."""
    facts = {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "architecture": "x86_64",
        "kernel": "6.17.0-1012-gcp",
        "os_family": "Debian",
    }
    play = [
        {
            "name": "GDRCopy's install checks",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"name": "Facts", "ansible.builtin.set_fact": {"ansible_facts": facts}},
                {
                    "name": "Install",
                    "ansible.builtin.include_role": {"name": "gdrcopy", "tasks_from": "install-Debian.yml"},
                },
            ],
        }
    ]
    extra = {"__gdrcopy_build_packages": [], "gdrcopy_url": f"file://{tmp_path}/none"}
    if version:
        extra["gdrcopy_version"] = version
    _rc, results = run_playbook(tmp_path, _host(gpufleet_fabric="efa"), play, "-e", json.dumps(extra))
    check = results["node"][KERNEL_CHECK]
    assert bool(check.get("failed")) is not builds, check
    if not builds:
        assert "6.17.0-1012-gcp" in check["msg"] and "2.5.2" in check["msg"], check["msg"]


@pytest.mark.parametrize(
    ("programs", "packaged", "found"),
    [(("gdrcopy_sanity",), None, "verify"), ((), "2.5.2-1", "verify"), ((), None, "install")],
)
def test_detect_verifies_what_the_node_has_and_installs_what_it_lacks(tmp_path, programs, packaged, found):
    """The x86_64 DLAMI 22.04: no x86_64 page says whether it ships GDRCopy, so the role looks (issue 31, item
    5): GDRCopy's test program or its libgdrapi package makes it verify; neither makes it install (under
    --tags install here, so the stand-in tree is not written to)."""
    rc, results = _verify(
        tmp_path,
        loaded=True,
        programs=programs,
        packaged=packaged,
        tags="install",
        image="dlami-base-oss-ubuntu-22.04",
    )
    decided = results["Verify what the image ships, install what it lacks"]["ansible_facts"]["gdrcopy_mode"]
    assert decided.strip() == found, results
    installing = not results["Install NVIDIA's GDRCopy packages"].get("skipped")
    assert installing == (found == "install"), results["Install NVIDIA's GDRCopy packages"]
    if found == "verify":
        assert rc == 0, {name: r.get("msg") for name, r in results.items() if r.get("failed")}
