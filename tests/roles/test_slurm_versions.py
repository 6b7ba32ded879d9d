"""The slurm role's one-Slurm check, run for real on this machine (connection local): each node's reading
(``tasks/node.yml``: ``slurmctld -V`` on the controller, ``slurmd -V`` on compute nodes, ``sinfo -V``
everywhere) against the pinned release, before any daemon starts.

The binaries are stand-ins on PATH that print what the real ones print: Debian's and Ubuntu's builds say
``slurm-wlm 22.05.8`` (``slurmctld-wlm -V`` of Debian 12's slurmctld 22.05.8-4+deb12u3, run here), SchedMD's
release as the role builds it ``slurm 24.11.5`` (``print_slurm_version``: PACKAGE_NAME, then the version).
Every host here shares this machine's PATH, so a case differs by daemon: the controller's slurmctld, the
compute nodes' slurmd, everyone's commands.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from path_stand_ins import stand_ins
from playbook_json import run_playbook, software

from gpufleet.catalog.slurm import DEFAULT_SLURM

ROOT = Path(__file__).resolve().parents[2]

CHECK = f"Assert that every node runs Slurm {DEFAULT_SLURM}"
PINNED = f"slurm {DEFAULT_SLURM}"
BOOKWORM = "slurm-wlm 22.05.8"  # Debian 12's own Slurm, left on a node
NOBLE = "slurm-wlm 23.11.4"  # Ubuntu 24.04's own


# Slurm's commands read slurm.conf even for -V (24.11.5 on the baked local node before configure: "sinfo:
# fatal: Could not establish a configuration source"), so the stand-in does too.
NEEDS_CONFIG = '[ -s "$SLURM_CONF" ] || { echo "fatal: no configuration source" >&2; exit 1; }\n'


def converge(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    slurmctld: str | None,
    slurmd: str | None,
    client: str | None,
) -> tuple[int, dict[str, dict[str, dict]]]:
    """node.yml then versions.yml on a head node, a login node and two compute nodes, with these -V outputs
    (None: the binary is not installed)."""
    versions = {"slurmctld": slurmctld, "slurmd": slurmd, "sinfo": client}
    stand_ins(
        tmp_path,
        monkeypatch,
        {
            name: (NEEDS_CONFIG if name == "sinfo" else "") + f'[ "$1" = -V ] || exit 64\necho "{out}"'
            for name, out in versions.items()
            if out is not None
        },
    )
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": {**local, "gpufleet_software": software()},
            "children": {
                "slurm_controller": {"hosts": {"head": {}}},
                "slurm_login": {"hosts": {"head": {}, "login": {}}},
                "compute": {"hosts": {"gpu-0": {}, "gpu-1": {}}},
            },
        }
    }
    play = [
        {
            "name": "Slurm",
            "hosts": "all",
            "gather_subset": ["!all", "min"],  # the OS's variables: vars/Debian.yml
            "tasks": [
                {"name": "Read", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "node"}},
                {
                    "name": "Versions",
                    "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "versions"},
                },
                {"name": "After the check", "ansible.builtin.debug": {"msg": "daemons would start here"}},
            ],
        }
    ]
    return run_playbook(tmp_path, inventory, play)


def refusals(results: dict[str, dict[str, dict]]) -> dict[str, str]:
    """{host: the check's message} for each refused node (the check runs once, over every node)."""
    ran = [r[CHECK] for r in results.values() if CHECK in r and not r[CHECK].get("skipped")]
    assert len(ran) == 1, results
    return {item["item"]: " ".join(item["msg"].split()) for item in ran[0]["results"] if item.get("failed")}


def test_every_node_on_the_pinned_slurm_passes(tmp_path, monkeypatch):
    rc, results = converge(tmp_path, monkeypatch, PINNED, PINNED, PINNED)
    assert rc == 0 and refusals(results) == {}
    assert all("After the check" in results[host] for host in ("head", "login", "gpu-0", "gpu-1"))


@pytest.mark.parametrize(
    ("slurmd", "would"),
    [
        # a leftover older slurmd that Slurm itself would still take: 23.11 is two major releases behind 24.11
        (NOBLE, "slurmctld 24.11 would still accept it (2 major release(s) older, up to 3 accepted)"),
        (
            "slurm 23.02.7",
            "slurmctld 24.11 would still accept it (3 major release(s) older, up to 3 accepted)",
        ),
        # Debian 12's 22.05 is four behind
        (BOOKWORM, "it is 4 major releases older than slurmctld 24.11 accepts (3): it would never register"),
        ("slurm 26.05.5", "a slurmd newer than slurmctld never registers"),
        # the same major release, another maintenance release: still not the one Slurm
        (
            "slurm 24.11.4",
            "slurmctld 24.11 would still accept it (0 major release(s) older, up to 3 accepted)",
        ),
    ],
)
def test_a_compute_node_on_another_slurm_is_refused_naming_both(tmp_path, monkeypatch, slurmd, would):
    rc, results = converge(tmp_path, monkeypatch, PINNED, slurmd, PINNED)
    assert rc != 0
    found = slurmd.split()[-1]
    messages = refusals(results)
    assert set(messages) == {"gpu-0", "gpu-1"}, messages
    for host in ("gpu-0", "gpu-1"):
        message = messages[host]
        assert (
            f"slurmd {found} on {host} differs from Slurm {DEFAULT_SLURM}, which slurmctld on head runs"
            in message
        )
        assert would in message, message
        assert "gpufleet refuses the mix" in message and "--skip-tags install" in message, message
    # any_errors_fatal: no host goes on to start its daemons
    assert not any("After the check" in tasks for tasks in results.values()), results


def test_a_leftover_controller_and_commands_are_named(tmp_path, monkeypatch):
    rc, results = converge(tmp_path, monkeypatch, NOBLE, PINNED, BOOKWORM)
    assert rc != 0
    messages = refusals(results)
    assert set(messages) == {"head", "login", "gpu-0", "gpu-1"}, messages
    assert messages["head"].startswith("slurmctld 23.11.4, the commands (sinfo -V) 22.05.8 on head differ"), (
        messages
    )
    assert messages["login"].startswith("the commands (sinfo -V) 22.05.8 on login differs"), messages
    # the pinned slurmd is fine; its commands are not, and the controller is not the pin's release
    assert messages["gpu-0"].startswith(
        "the commands (sinfo -V) 22.05.8 on gpu-0 differs from Slurm 24.11.5, which the pin"
    )


def test_a_node_without_slurm_is_named(tmp_path, monkeypatch):
    rc, results = converge(tmp_path, monkeypatch, PINNED, None, None)
    assert rc != 0
    messages = refusals(results)
    assert messages["login"].startswith("login runs no Slurm: sinfo -V print nothing"), messages
    assert messages["gpu-0"].startswith("gpu-0 runs no Slurm: slurmd -V, sinfo -V print nothing"), messages
    assert "--skip-tags install" in messages["gpu-0"], messages
    # the controller's slurmctld answers, its commands do not
    assert messages["head"].startswith("the commands (sinfo -V) none on head differs"), messages


def _user_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uid: str) -> dict[str, dict[str, dict]]:
    """node.yml then user.yml on one node whose ``id -u slurm`` prints ``uid`` (a stand-in ``id`` on PATH)."""
    stand_ins(
        tmp_path,
        monkeypatch,
        {"id": f'[ "$1 $2" = "-u slurm" ] && echo {uid} && exit 0\nexec /usr/bin/id "$@"'},
    )
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "vars": local,
            "children": {"slurm_controller": {"hosts": {"head": {}}}, "compute": {"hosts": {}}},
        }
    }
    play = [
        {
            "name": "Slurm",
            "hosts": "all",
            "gather_subset": ["!all", "min"],
            "tasks": [
                {"name": "Read", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "node"}},
                {"name": "User", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "user"}},
            ],
        }
    ]
    return run_playbook(tmp_path, inventory, play)[1]


def test_a_slurm_user_with_another_uid_is_refused_naming_both_ids(tmp_path, monkeypatch):
    # The package's preinst keeps a slurm user that exists already: slurmd would refuse the controller's RPCs.
    results = _user_check(tmp_path, monkeypatch, "1001")
    check = results["head"]["Assert that the slurm user has uid 64030"]
    assert check.get("failed"), check
    message = " ".join(check["msg"].split())
    assert "has uid 1001, not 64030 (slurm_user_id)" in message and "usermod -u 64030 slurm" in message


def test_the_slurm_user_with_the_clusters_uid_passes(tmp_path, monkeypatch):
    results = _user_check(tmp_path, monkeypatch, "64030")
    assert not results["head"]["Assert that the slurm user has uid 64030"].get("failed")


def test_a_baked_nodes_configure_reads_the_node_before_the_one_slurm_check(tmp_path) -> None:
    # gpufleet configures a baked node with --skip-tags install (pipeline.py), which also skips a task tagged
    # [install, configure]: the check then read no node and refused every one ("runs no Slurm", the cluster
    # runs of 2026-11-27 17:38).
    (tmp_path / "inventory.yml").write_text(
        "all:\n  children:\n    slurm_controller: {hosts: {head: {}}}\n    compute: {hosts: {gpu-0: {}}}\n"
    )
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
         "--list-tasks", "--skip-tags", "install", str(ROOT / "playbooks" / "site.yml")],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    tasks = [
        line.split("\t")[0].strip() for line in listed.splitlines() if line.strip().startswith("slurm : ")
    ]
    read = "slurm : Read this node's userland, cgroup version and installed Slurm"
    assert read in tasks, listed
    assert tasks.index(read) < tasks.index("slurm : Assert that every node runs Slurm {{ slurm_version }}"), (
        tasks
    )
