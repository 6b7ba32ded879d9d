"""gcp_gpudirect's node steps, run for real on this machine (connection local) with the vendors' tools
replaced by stand-ins (``gcp_gpudirect/bin``: DKMS, apt-get download, modprobe, udevadm, update-initramfs,
systemctl, nvidia-ctk) and the node's paths (``/usr/src``, ``/sys/module``, ``/etc/udev``, ``/etc/docker``,
the slurmd drop-in) moved under the test's folder:

- the dmabuf import helper (TCPXO) is patched only for kernels that take string namespaces, built and
  installed with DKMS, loaded, and a second run changes nothing (Cluster Toolkit's a3mega blueprint);
- the aperture udev rule is applied to the devices present, the initramfs rebuilt, and slurmd waits for them;
- Docker gets NVIDIA's runtime (``--gpus all`` in the receive-datapath manager's unit) once;
- the install steps of TCPX and TCPXO put the NVIDIA Container Toolkit in before any container runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

HERE = Path(__file__).with_name("gcp_gpudirect")
ROLE = ROOT / "roles" / "gcp_gpudirect"
TASKS = ROLE / "tasks"

# The package as the a3mega blueprint shows it (a3mega-slurm-blueprint.yaml:343-372 @1047080: one .deb whose
# data holds usr/src/dmabuf-import-helper-1.1/import-helper.c with MODULE_IMPORT_NS(DMA_BUF)); the dkms.conf
# and Makefile beside it are the usual DKMS layout, assumed (the package is only in Google's repository).
_SOURCE = """// SPDX-License-Identifier: GPL-2.0
#include <linux/dma-buf.h>
#include <linux/module.h>

MODULE_LICENSE("GPL");
MODULE_IMPORT_NS(DMA_BUF);
"""
_DKMS_CONF = """PACKAGE_NAME="dmabuf-import-helper"
PACKAGE_VERSION="1.1"
BUILT_MODULE_NAME[0]="import-helper"
DEST_MODULE_LOCATION[0]="/updates/dkms"
AUTOINSTALL="yes"
"""


def _deb(folder: Path, version: str = "1.1") -> Path:
    """A dmabuf-import-helper package for the fake repository, built with dpkg-deb."""
    tree = folder / "pkg"
    src = tree / "usr" / "src" / f"dmabuf-import-helper-{version}"
    src.mkdir(parents=True)
    (src / "import-helper.c").write_text(_SOURCE)
    (src / "dkms.conf").write_text(_DKMS_CONF.replace("1.1", version))
    (src / "Makefile").write_text("obj-m += import-helper.o\n")
    (tree / "DEBIAN").mkdir()
    (tree / "DEBIAN" / "control").write_text(
        f"Package: dmabuf-import-helper\nVersion: {version}\nArchitecture: all\nDepends: dkms\n"
        "Maintainer: Google <gce-ai-infra@google.com>\nDescription: dmabuf import helper (DKMS)\n"
    )
    repo = folder / "repo"
    repo.mkdir()
    deb = repo / f"dmabuf-import-helper_{version}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-b", str(tree), str(deb)], check=True, capture_output=True
    )
    return deb


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in tools first on PATH, and the fake node's folder."""
    root = tmp_path / "node"
    (root / "usr" / "src").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{HERE / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NODE", str(root))
    monkeypatch.setenv("FAKE_SRC_ROOT", str(root / "usr" / "src"))
    monkeypatch.setenv("FAKE_REPO", str(tmp_path / "repo"))
    return root


def _converge(tmp_path: Path, node: Path, kernel: str, task_files: list[str]) -> tuple[int, dict[str, dict]]:
    os.environ["FAKE_KERNEL"] = kernel
    overrides = {
        "__gcp_gpudirect_kernel": kernel,
        "__gcp_gpudirect_dmabuf": {
            "package": "dmabuf-import-helper",
            "src_root": str(node / "usr" / "src"),
            "source_file": "import-helper.c",
            "string_ns_kernel": "6.13",
            "module": "import-helper",
            "sys_module": str(node / "sys" / "module" / "import_helper"),
            "modules_load": str(node / "etc" / "modules-load.d" / "gpufleet-import-helper.conf"),
        },
        "__gcp_gpudirect_aperture": {
            "dir": str(node / "dev" / "aperture_devices"),
            "udev_rule": str(node / "etc" / "udev" / "00-a3-megagpu.rules"),
            "wait_script": str(node / "usr" / "local" / "sbin" / "gpufleet-wait-aperture-devices"),
            "slurmd_dropin": str(
                node / "etc" / "systemd" / "system" / "slurmd.service.d" / "gpufleet-aperture.conf"
            ),
        },
        "__gcp_gpudirect_container_toolkit": {
            "daemon_json": str(node / "etc" / "docker" / "daemon.json"),
        },
    }
    (node / "etc" / "modules-load.d").mkdir(parents=True, exist_ok=True)
    (node / "etc" / "udev").mkdir(parents=True, exist_ok=True)
    (node / "usr" / "local" / "sbin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "extra.json").write_text(json.dumps(overrides))
    play = [
        {
            "name": "Node steps",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": f"Run {name}",
                    "ansible.builtin.include_role": {"name": "gcp_gpudirect", "tasks_from": name},
                }
                for name in task_files
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {
                "a3mega": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_fabric": "tcpxo",
                    "gpufleet_provider": "gcp",
                }
            }
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play, "-e", f"@{tmp_path / 'extra.json'}")
    return rc, results.get("a3mega", {})


def _failures(results: dict[str, dict]) -> dict[str, str]:
    return {name: str(r.get("msg") or r.get("stderr")) for name, r in results.items() if r.get("failed")}


def _changed(results: dict[str, dict]) -> list[str]:
    return [name for name, r in results.items() if r.get("changed")]


def _calls(node: Path) -> list[str]:
    log = node / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    ("kernel", "patched"),
    [("6.17.0-1009-gcp", True), ("6.8.0-1015-gcp", False)],
    ids=["noble-accelerator-6.17", "noble-6.8"],
)
def test_dmabuf_helper_builds_loads_and_converges(tmp_path: Path, node: Path, kernel: str, patched: bool):
    _deb(tmp_path)
    rc, results = _converge(tmp_path, node, kernel, ["dmabuf-helper.yml"])
    assert rc == 0, _failures(results)
    source = (node / "usr" / "src" / "dmabuf-import-helper-1.1" / "import-helper.c").read_text()
    expected = 'MODULE_IMPORT_NS("DMA_BUF");' if patched else "MODULE_IMPORT_NS(DMA_BUF);"
    assert expected in source, source
    calls = _calls(node)
    assert f"dkms install -m dmabuf-import-helper -v 1.1 -k {kernel} --force" in calls, calls
    assert "modprobe import-helper" in calls, calls
    assert (node / "sys" / "module" / "import_helper").is_dir()
    assert (node / "etc" / "modules-load.d" / "gpufleet-import-helper.conf").read_text() == "import-helper\n"

    (node / "calls.log").unlink()
    (tmp_path / "again").mkdir()
    rc, again = _converge(tmp_path / "again", node, kernel, ["dmabuf-helper.yml"])
    assert rc == 0 and _changed(again) == [], _changed(again)
    assert _calls(node) == [f"dkms status -m dmabuf-import-helper -v 1.1 -k {kernel}"], _calls(node)


def test_dmabuf_helper_refuses_a_package_of_another_version(tmp_path: Path, node: Path):
    _deb(tmp_path, version="1.2")
    rc, results = _converge(tmp_path, node, "6.17.0-1009-gcp", ["dmabuf-helper.yml"])
    assert rc != 0
    message = results["Assert that the package is the pinned version"]["msg"]
    assert "dmabuf-import-helper_1.2_all.deb" in message and "is not version 1.1" in message, message
    assert not any(call.startswith("dkms add") for call in _calls(node)), _calls(node)


def test_aperture_rule_is_applied_and_slurmd_waits_for_the_devices(tmp_path: Path, node: Path):
    rc, results = _converge(tmp_path, node, "6.17.0-1009-gcp", ["aperture.yml"])
    assert rc == 0, _failures(results)
    calls = _calls(node)
    assert "update-initramfs -u -k all" in calls, calls
    trigger = (
        "udevadm trigger --action=add --subsystem-match=pci"
        " --attr-match=vendor=0x1ae0 --attr-match=device=0x0084"
    )
    assert (
        calls.index("udevadm control --reload-rules") < calls.index(trigger) < calls.index("udevadm settle")
    )
    assert "systemctl daemon-reload" in calls, calls
    rule = (node / "etc" / "udev" / "00-a3-megagpu.rules").read_text()
    assert 'ATTR{vendor}=="0x1ae0", ATTR{device}=="0x0084"' in rule
    dropin = (node / "etc" / "systemd" / "system" / "slurmd.service.d" / "gpufleet-aperture.conf").read_text()
    script = node / "usr" / "local" / "sbin" / "gpufleet-wait-aperture-devices"
    assert f"[Service]\nExecCondition={script}\n" in dropin, dropin

    apertures = node / "dev" / "aperture_devices"
    apertures.mkdir(parents=True)
    (apertures / "0000:06:00.1").mkdir()
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0, done.stderr
    (apertures / "0000:06:00.1").rmdir()
    fast = tmp_path / "fastbin"
    fast.mkdir()
    (fast / "sleep").write_text("#!/bin/sh\nexit 0\n")
    (fast / "sleep").chmod(0o755)
    done = subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=10, check=False,
        env={"PATH": f"{fast}:/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1 and "no aperture devices" in done.stderr, done

    (node / "calls.log").unlink()
    (tmp_path / "again").mkdir()
    rc, again = _converge(tmp_path / "again", node, "6.17.0-1009-gcp", ["aperture.yml"])
    assert rc == 0 and _changed(again) == [] and _calls(node) == [], (_changed(again), _calls(node))


def test_docker_gets_nvidias_runtime_once_and_restarts(tmp_path: Path, node: Path):
    daemon_json = node / "etc" / "docker" / "daemon.json"
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text(json.dumps({"data-root": "/mnt/localssd/docker"}))
    rc, results = _converge(tmp_path, node, "6.17.0-1009-gcp", ["docker-nvidia-runtime.yml"])
    assert rc == 0, _failures(results)
    written = json.loads(daemon_json.read_text())
    assert written == {
        "data-root": "/mnt/localssd/docker",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }, written
    calls = _calls(node)
    assert calls == [
        f"nvidia-ctk runtime configure --runtime=docker --config={daemon_json}",
        "systemctl restart docker",
    ], calls

    (node / "calls.log").unlink()
    (tmp_path / "again").mkdir()
    rc, again = _converge(tmp_path / "again", node, "6.17.0-1009-gcp", ["docker-nvidia-runtime.yml"])
    assert rc == 0 and _changed(again) == [] and _calls(node) == [], (_changed(again), _calls(node))


def _steps(path: Path) -> list[dict]:
    """The tasks of a task file in order, imported task files and blocks walked into."""
    steps: list[dict] = []
    for task in yaml.safe_load(path.read_text()) or []:
        if "ansible.builtin.import_tasks" in task:
            steps.extend(_steps(TASKS / task["ansible.builtin.import_tasks"]))
        elif "block" in task:
            steps.extend(task["block"])
        else:
            steps.append(task)
    return steps


@pytest.mark.parametrize("mode", ["tcpx", "tcpxo"])
def test_the_container_toolkit_is_in_before_any_container_runs(mode: str):
    """The toolkit is installed by the container_toolkit role in the GPU play, before the fabric play (issue
    31, N6): this role checks it is there, then registers the runtime, then runs containers; it installs none
    of the toolkit's packages itself."""
    steps = _steps(TASKS / f"install-{mode}.yml")
    text = [yaml.safe_dump(step) for step in steps]

    def first(predicate) -> int:
        return next((i for i, step in enumerate(text) if predicate(step)), -1)

    check = first(lambda s: "nvidia-container-toolkit" in s and "dpkg-query" in s)
    ctk = first(lambda s: "nvidia-ctk" in s and "--runtime=docker" in s)
    container = first(lambda s: "docker_image_pull" in s or "'docker', 'run'" in s)
    assert -1 not in (check, ctk, container), (check, ctk, container)
    assert check < ctk < container, (check, ctk, container)
    assert not any("ansible.builtin.apt" in s and "container" in s for s in text), "gcp_gpudirect installs it"
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    names = [play["name"] for play in site]
    gpu = next(play for play in site if play["name"] == "GPU node stack")
    assert "container_toolkit" in [role["role"] for role in gpu["roles"]]
    assert names.index("GPU node stack") < names.index("Fabric"), names
    unit = (ROLE / "templates" / "gpufleet-rxdm.service.j2").read_text()
    assert "--gpus all" in unit and "After=docker.service systemd-modules-load.service" in unit, unit
