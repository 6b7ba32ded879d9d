"""The containers role on a node (issue 31, N7 and M3). enroot on Ubuntu 24.04: where the kernel restricts
unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1), the containers role installs
enroot's own AppArmor profile where AppArmor loads it at boot and loads it now, as enroot's .deb does
(NVIDIA/enroot v4.1.2 pkg/deb/rules:35,42); elsewhere it does nothing. Its verify step starts a container as
an unprivileged user; the container the smoke test builds (the host's /bin/sh and /usr/bin/true with their
libraries) is run here for real through chroot, by a stand-in of `enroot start` that enters it the way
enroot-switchroot does (`<shell> -c 'exec "$@"' sh CMD`). Run by Ansible on this machine (connection local);
apparmor_parser is a stand-in that records its arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook_json import ROOT, run_playbook

ROLE = ROOT / "roles" / "containers"
# NVIDIA/enroot v4.1.2 conf/apparmor.profile, as the Makefile installs it.
PROFILE = (
    "abi <abi/4.0>,\ninclude <tunables/global>\n\n"
    "/usr/bin/enroot-nsenter flags=(unconfined) {\n  allow userns create,\n}\n"
)


def _world(tmp_path: Path, restrict: str | None, loaded: str = "") -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "parser.log"
    parser = bin_dir / "apparmor_parser"
    parser.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    parser.chmod(0o755)
    sysctl = tmp_path / "apparmor_restrict_unprivileged_userns"
    if restrict is not None:
        sysctl.write_text(f"{restrict}\n")
    source = tmp_path / "usr-share-enroot" / "apparmor.profile"
    source.parent.mkdir(exist_ok=True)
    source.write_text(PROFILE)
    profiles = tmp_path / "profiles"
    profiles.write_text(loaded)
    return {
        "__containers_apparmor_sysctl": str(sysctl),
        "__containers_apparmor_source": str(source),
        "__containers_apparmor_profile": str(tmp_path / "etc-apparmor.d" / "enroot"),
        "__containers_apparmor_loaded": str(profiles),
    }


def _run(tmp_path: Path, extra: dict[str, str]) -> tuple[int, dict[str, dict]]:
    (tmp_path / "etc-apparmor.d").mkdir(exist_ok=True)
    play = [
        {
            "name": "enroot's AppArmor profile",
            "hosts": "all",
            "gather_facts": False,
            "environment": {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
            "tasks": [
                {
                    "name": "AppArmor",
                    "ansible.builtin.include_role": {"name": "containers", "tasks_from": "apparmor.yml"},
                }
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play, "-e", json.dumps(extra))
    return rc, results.get("node", {})


@pytest.mark.skipif(os.geteuid() != 0, reason="the role installs the profile owned by root")
def test_the_profile_is_installed_and_loaded_where_the_kernel_restricts_user_namespaces(tmp_path):
    extra = _world(tmp_path, "1")
    rc, results = _run(tmp_path, extra)
    assert rc == 0, {name: r.get("msg") for name, r in results.items() if r.get("failed")}
    assert Path(extra["__containers_apparmor_profile"]).read_text() == PROFILE
    assert (tmp_path / "parser.log").read_text().split() == [
        "-r",
        "-T",
        "-W",
        extra["__containers_apparmor_profile"],
    ]
    # Once the kernel lists it, a second run changes nothing and loads nothing.
    Path(extra["__containers_apparmor_loaded"]).write_text("/usr/bin/enroot-nsenter (unconfined)\n")
    (tmp_path / "parser.log").unlink()
    rc, results = _run(tmp_path, extra)
    assert rc == 0 and not any(r.get("changed") for r in results.values()), results
    assert not (tmp_path / "parser.log").exists()


@pytest.mark.parametrize("restrict", ["0", None])
def test_nothing_is_done_where_the_kernel_does_not_restrict_them(tmp_path, restrict):
    extra = _world(tmp_path, restrict)
    rc, results = _run(tmp_path, extra)
    assert rc == 0, results
    assert not Path(extra["__containers_apparmor_profile"]).exists()
    assert not (tmp_path / "parser.log").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the smoke test chowns the container to its user and chroots")
def test_the_smoke_tests_container_runs_a_command_as_enroot_switchroot_would(tmp_path):
    """The smoke test's container is complete enough to run a command: a stand-in `enroot start` enters it
    with chroot the way enroot-switchroot does; `runuser` runs what it is given (the user switch is real
    enroot's business, tested on the local cluster's nodes)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    local = tmp_path / "enroot-local"
    seen = tmp_path / "seen"
    (bin_dir / "runuser").write_text(
        '#!/bin/sh\n[ "$1" = -u ] && [ "$3" = -- ] || exit 9\nshift 3\nexec "$@"\n'
    )
    (bin_dir / "enroot").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = start ] || exit 8\nroot="{local}/data/user-$(id -u nobody)/$2"\n'
        f'ls -n "$root/bin/sh" > {seen}\n'
        'exec chroot "$root" /bin/sh -c \'exec "$@"\' sh "$3"\n'
    )
    for name in ("runuser", "enroot"):
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "enroot-smoke"
    play = [
        {
            "name": "Render and run the smoke test",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"containers_local_dir": str(local), "containers_smoke_user": "nobody"},
            "tasks": [
                {
                    "name": "Render",
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates" / "enroot-smoke.sh.j2"),
                        "dest": str(script),
                        "mode": "0755",
                    },
                },
                {
                    "name": "Run",
                    "ansible.builtin.command": {"argv": [str(script)]},
                    "environment": {"PATH": f"{bin_dir}:{os.environ['PATH']}"},
                },
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
        }
    }
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc == 0, results["node"]["Run"]
    nobody = os.popen("id -u nobody").read().strip()
    assert seen.read_text().split()[2] == nobody, seen.read_text()  # the container belongs to its user
    assert not (local / "data" / f"user-{nobody}" / "gpufleet-smoke").exists()  # and is gone after


@pytest.mark.parametrize(
    ("provider", "fabric", "sources"),
    [
        # Google's fabrics: what nccl.env sources inside the container must be there (issue 31, M3).
        ("gcp", "roce", ["/dev/infiniband", "/usr/local/gib"]),
        ("gcp", "tcpx", ["/var/lib/tcpx", "/run/tcpx"]),
        ("gcp", "tcpxo", ["/var/lib/tcpxo", "/dev/aperture_devices"]),
        ("baremetal", "roce", ["/dev/infiniband"]),
        ("aws", "efa", ["/dev/infiniband", "/opt/amazon/efa", "/opt/amazon/ofi-nccl"]),
    ],
)
def test_every_container_gets_the_fabrics_devices_and_plugin(tmp_path, provider, fabric, sources):
    out = tmp_path / "50-gpufleet.fstab"
    play = [
        {
            "name": "Render the mounts",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"name": "Defaults", "ansible.builtin.include_vars": str(ROLE / "defaults" / "main.yml")},
                {
                    "name": "Render",
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates" / "mounts.fstab.j2"),
                        "dest": str(out),
                        "mode": "0644",
                    },
                },
            ],
        }
    ]
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_provider": provider,
        "gpufleet_fabric": fabric,
    }
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"node": host}}}, play)
    assert rc == 0, results
    lines = [line.split() for line in out.read_text().splitlines() if line and not line.startswith("#")]
    fabric_sources = [fields[0] for fields in lines if fields[0] != "/etc/gpufleet"]
    assert fabric_sources == sources, out.read_text()
    assert all(fields[0] == fields[1] for fields in lines), lines  # each at its host path


@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-tmpfiles makes the folder owned by root")
def test_a_jobs_user_can_make_its_runtime_folder_on_a_freshly_booted_node(tmp_path):
    """enroot.conf puts each user's runtime folder in /run/enroot/user-<uid>; /run is root's and empty at
    boot, so `enroot start` as a job's user failed on a node booted from the baked image ("mkdir: cannot
    create directory '/run/enroot': Permission denied", 2026-11-27). The install phase's tmpfiles.d line
    makes the parent at boot, sticky and open to all: systemd-tmpfiles applies it here under a root of its
    own."""
    runtime = next(
        line.split(None, 1)[1]
        for line in (ROOT / "roles/containers/templates/enroot.conf.j2").read_text().splitlines()
        if line.startswith("ENROOT_RUNTIME_PATH")
    )
    parent = runtime.strip().rsplit("/", 1)[0]  # /run/enroot of /run/enroot/user-$(id -u)
    tasks = yaml.safe_load((ROOT / "roles/containers/tasks/files.yml").read_text())
    booted = [
        t["ansible.builtin.copy"] for t in tasks if "tmpfiles.d" in str(t.get("ansible.builtin.copy", {}))
    ]
    assert booted, "no tmpfiles.d entry in roles/containers/tasks/files.yml makes " + parent
    config = tmp_path / booted[0]["dest"].lstrip("/")
    config.parent.mkdir(parents=True)
    config.write_text(booted[0]["content"])
    (tmp_path / "run").mkdir(mode=0o755)
    done = subprocess.run(
        ["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(config)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    made = (tmp_path / parent.lstrip("/")).stat()
    assert oct(made.st_mode & 0o7777) == "0o1777" and made.st_uid == 0, oct(made.st_mode)
