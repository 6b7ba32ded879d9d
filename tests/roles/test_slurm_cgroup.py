"""N1 of the roles reading (/work/shared/research/roles-audit-2026-11-27.md): on Ubuntu 22.04, which boots the
unified cgroup v2 tree only, the distribution's Slurm 21.08 has no cgroup/v2 plugin, so slurmd with the
role's proctrack/cgroup and task/cgroup does not start (every AWS example, GCP A3 High).

Two parts. What the role puts on such a node: its Slurm release must have cgroup/v2 (first in 22.05,
SchedMD/slurm tag slurm-22-05-0-1 RELEASE_NOTES), built with what cgroup/v2 needs. This failed on the role
that installed the distribution's Slurm (jammy's slurmd is 21.08.5-2ubuntu1,
https://packages.ubuntu.com/jammy/slurmd, read 2026-11-24) and passes with the Slurm it builds.
And what configure does on a node, run for real here (connection local): the role's node reading
(tasks/node.yml) and cgroup tasks (tasks/cgroup.yml), with this machine's /sys/fs/cgroup type, Slurm's
plugin folders and the D-Bus socket stood in for: cgroup.conf names the plugin of the node's cgroup version,
and a node whose Slurm lacks it (a jammy node still on the distribution's 21.08: slurm-wlm/cgroup_v1.so only)
is refused before any daemon starts, naming the plugins it has.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

from gpufleet.spec.model import Software

ROLE = ROOT / "roles" / "slurm"
CGROUP_V2_FIRST = (22, 5)  # the first Slurm release with the cgroup/v2 plugin
# What Ubuntu 22.04's own packages install, were the role to take the distribution's Slurm.
JAMMY_DISTRO_SLURM = "21.08.5"
CHECK = "Assert that the node's Slurm has the cgroup plugin its cgroup version needs"


def role_yaml(*parts: str) -> dict:
    path = ROLE.joinpath(*parts)
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def release_on_a_jammy_node() -> str:
    """The Slurm release the role installs on an Ubuntu 22.04 node: the distribution's when its OS variables
    name the distribution's packages (the role before the fix), else the one it builds (slurm_version: the
    spec's software.slurm, which the inventory carries)."""
    os_vars = role_yaml("vars", "Debian.yml")
    if any(key.startswith("__slurm_packages_") for key in os_vars):
        return JAMMY_DISTRO_SLURM
    return Software().slurm


def test_n1_the_slurm_a_cgroup_v2_jammy_node_gets_has_the_cgroup_v2_plugin() -> None:
    release = release_on_a_jammy_node()
    major = tuple(int(part) for part in release.split(".")[:2])
    assert major >= CGROUP_V2_FIRST, (
        f"an Ubuntu 22.04 node (cgroup v2 only) gets Slurm {release}, which has no cgroup/v2 plugin "
        "(first in 22.05): slurmd with proctrack/cgroup and task/cgroup does not start"
    )
    # ... and the build makes that plugin: configure asked for it, its build package is there, and the build
    # fails without cgroup_v2.so (files/build-slurm-deb.sh checks the plugins the role requires).
    defaults, role_vars = role_yaml("defaults", "main.yml"), role_yaml("vars", "main.yml")
    assert "--enable-cgroupv2" in defaults["slurm_configure_options"]
    assert "libdbus-1-dev" in role_yaml("vars", "Debian.yml")["__slurm_build_packages"]
    assert {"cgroup_v2.so", "cgroup_v1.so"} <= set(role_vars["__slurm_required_plugins"])


# ---- what configure does on a node -------------------------------------------------------------


def node_files(tmp_path: Path, cgroupfs: str, plugins: dict[str, list[str]], dbus: bool) -> dict[str, str]:
    """Stand-ins: ``stat`` says ``cgroupfs`` for /sys/fs/cgroup, a lib folder holds ``plugins`` per Slurm
    folder, a listening socket stands for the system bus when ``dbus``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_stat = bin_dir / "stat"
    fake_stat.write_text(
        f'#!/bin/sh\nif [ "$1" = -fc ] && [ "$3" = /sys/fs/cgroup ]; then echo {cgroupfs}; exit 0; fi\n'
        'exec /usr/bin/stat "$@"\n'
    )
    fake_stat.chmod(0o755)
    lib = tmp_path / "lib"
    for folder, names in plugins.items():
        (lib / "x86_64-linux-gnu" / folder).mkdir(parents=True)
        for name in names:
            (lib / "x86_64-linux-gnu" / folder / f"cgroup_{name}.so").write_bytes(b"\x7fELF")
    bus = tmp_path / "system_bus_socket"
    if dbus:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(bus))
    (tmp_path / "etc").mkdir()
    return {
        "__slurm_lib_dir": str(lib),
        "__slurm_dbus_socket": str(bus),
        "__slurm_config_dir": str(tmp_path / "etc"),
        "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
    }


def configure_cgroup(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    cgroupfs: str,
    plugins: dict[str, list[str]],
    dbus: bool = True,
    proctrack: str = "proctrack/cgroup",
    task: str = "task/cgroup,task/affinity",
) -> tuple[int, dict[str, dict[str, dict]], str]:
    files = node_files(tmp_path, cgroupfs, plugins, dbus)
    monkeypatch.setenv("PATH", files.pop("PATH"))
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {
                "slurm_controller": {"hosts": {"head": {}}},
                "compute": {"hosts": {"gpu-0": {}}},
            },
        }
    }
    play = [
        {
            "name": "cgroup",
            "hosts": "gpu-0",
            "gather_subset": ["!all", "min"],
            "vars": {"slurm_proctrack_type": proctrack, "slurm_task_plugin": task},
            "tasks": [
                {"name": "Read", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "node"}},
                {"name": "Cgroup", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "cgroup"}},
                # no daemon to restart here: end before the role's handlers run
                {"name": "End", "ansible.builtin.meta": "end_play"},
            ],
        }
    ]
    extra = [arg for key, value in files.items() for arg in ("-e", f"{key}={value}")]
    rc, results = run_playbook(tmp_path, inventory, play, *extra)
    conf = tmp_path / "etc" / "cgroup.conf"
    return rc, results, conf.read_text() if conf.exists() else ""


BUILT = {"slurm": ["v1", "v2"]}  # the role's build: <multiarch>/slurm/cgroup_v1.so and cgroup_v2.so
JAMMY_DISTRO = {"slurm-wlm": ["v1"]}  # Ubuntu 22.04's slurm-wlm-basic-plugins 21.08.5: no v2


def lines(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line and not line.startswith("#")]


def test_a_cgroup_v2_node_gets_cgroup_v2(tmp_path, monkeypatch) -> None:
    rc, _, conf = configure_cgroup(tmp_path, monkeypatch, cgroupfs="cgroup2fs", plugins=BUILT)
    assert rc == 0
    assert lines(conf) == ["CgroupPlugin=cgroup/v2", "ConstrainCores=yes", "ConstrainDevices=yes",
                           "ConstrainRAMSpace=yes"], conf  # fmt: skip
    assert "/sys/fs/cgroup is cgroup2fs" in conf


def test_a_cgroup_v1_node_gets_cgroup_v1(tmp_path, monkeypatch) -> None:
    rc, _, conf = configure_cgroup(tmp_path, monkeypatch, cgroupfs="tmpfs", plugins=BUILT, dbus=False)
    assert rc == 0 and lines(conf)[0] == "CgroupPlugin=cgroup/v1", conf


def test_n1_a_cgroup_v2_node_on_the_distributions_slurm_is_refused(tmp_path, monkeypatch) -> None:
    rc, results, conf = configure_cgroup(tmp_path, monkeypatch, cgroupfs="cgroup2fs", plugins=JAMMY_DISTRO)
    assert rc != 0 and conf == ""
    message = " ".join(results["gpu-0"][CHECK]["msg"].split())
    assert (
        "/sys/fs/cgroup is cgroup2fs, so proctrack/cgroup and task/cgroup,task/affinity need cgroup/v2"
        in message
    )
    assert "has the cgroup plugins [v1] only: run the install phase" in message, message


def test_cgroup_v2_without_the_system_bus_is_refused(tmp_path, monkeypatch) -> None:
    rc, results, _ = configure_cgroup(tmp_path, monkeypatch, cgroupfs="cgroup2fs", plugins=BUILT, dbus=False)
    assert rc != 0
    assert "system_bus_socket is missing: install and start dbus" in results["gpu-0"][CHECK]["msg"]


def test_without_a_cgroup_plugin_slurm_leaves_cgroups_alone(tmp_path, monkeypatch) -> None:
    # the local backend's nodes: unprivileged containers, v1 controllers read-only (docs/local.md)
    rc, _, conf = configure_cgroup(
        tmp_path, monkeypatch, cgroupfs="tmpfs", plugins={}, dbus=False,
        proctrack="proctrack/linuxproc", task="task/none",
    )  # fmt: skip
    assert rc == 0 and lines(conf) == ["CgroupPlugin=disabled"], conf
