"""The ansible-core the head relay ships runs on the head's own python3 (issue 31, item 3).

The shipped images' heads run Ubuntu 22.04's Python 3.10 (the three AWS examples, A3 High) and Ubuntu
24.04's or DGX OS 7's 3.12; this machine runs 3.11 with ansible-core 2.19, whose controller support starts
at 3.11. The downloads below are real (pip download from this machine's package index, as gpufleet does)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from gpufleet.configure import head_ansible, relay
from gpufleet.configure.head_ansible import HeadPython, NoAnsibleForHead
from gpufleet.progress import SilentReporter

OURS = "2.19.14"
JAMMY = HeadPython(3, 10, "x86_64", "2.35")  # Ubuntu 22.04: python3 3.10, glibc 2.35
NOBLE = HeadPython(3, 12, "x86_64", "2.39")  # Ubuntu 24.04 and DGX OS 7: python3 3.12, glibc 2.39


@pytest.mark.parametrize(
    ("python", "release"),
    [
        ((3, 10), "2.17.14"),  # Ubuntu 22.04: only 2.16/2.17 run there as a controller
        ((3, 11), OURS),
        ((3, 12), OURS),  # Ubuntu 24.04, DGX OS 7: this machine's release, for 3.12
        ((3, 13), OURS),
        ((3, 9), None),
        ((3, 14), None),  # 2.20's window; no 2.20 release is listed to ship
    ],
)
def test_the_release_shipped_is_ours_where_its_series_supports_the_heads_python(
    python: tuple[int, int], release: str | None
) -> None:
    assert head_ansible.choose_release(python, OURS) == release


def test_a_head_like_this_machine_gets_this_machines_ansible_and_any_other_a_download() -> None:
    here = HeadPython(3, 11, "x86_64", "2.36")
    assert head_ansible.same_as_here(HeadPython(3, 11, "x86_64", "2.36"), here) is (sys.platform == "linux")
    assert not head_ansible.same_as_here(HeadPython(3, 11, "aarch64", "2.36"), here)
    assert not head_ansible.same_as_here(JAMMY, here)
    # This machine's compiled wheels may need its newer glibc.
    assert not head_ansible.same_as_here(HeadPython(3, 11, "x86_64", "2.31"), here)


def test_the_wheels_are_asked_for_the_heads_glibc_and_older() -> None:
    tags = head_ansible.platform_tags(JAMMY)
    assert tags[0] == "manylinux2014_x86_64"
    assert tags[1] == "manylinux_2_17_x86_64" and tags[-1] == "manylinux_2_35_x86_64"
    assert len(tags) == 1 + 35 - 17 + 1
    with pytest.raises(NoAnsibleForHead) as caught:
        head_ansible.platform_tags(HeadPython(3, 12, "x86_64", ""))
    assert "no glibc" in caught.value.message


def test_the_probe_line_is_read() -> None:
    assert HeadPython.parse("3 10 x86_64 2.35") == JAMMY
    assert HeadPython.parse("3 12 aarch64 -") == HeadPython(3, 12, "aarch64", "")


def test_the_collections_shipped_run_under_every_release_gpufleet_ships() -> None:
    """The collections come from this machine whatever the release: their requires_ansible must admit the
    oldest series shipped (2.17, for Python 3.10)."""
    from packaging.specifiers import SpecifierSet

    oldest = min(head_ansible.FALLBACK_RELEASES, key=lambda r: tuple(int(p) for p in r.split(".")))
    packages = relay.site_packages()
    for collection in relay.COLLECTIONS:
        runtime = yaml.safe_load(
            (packages / "ansible_collections" / collection / "meta" / "runtime.yml").read_text()
        )
        assert oldest in SpecifierSet(runtime["requires_ansible"]), (collection, runtime["requires_ansible"])


def test_a_jammy_head_gets_ansible_core_2_17_built_for_python_3_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    shipped = head_ansible.for_head(JAMMY, ours=OURS)
    assert shipped.release == "2.17.14" and shipped.downloaded
    py = shipped.site_packages
    assert py == tmp_path / "cache" / "relay-ansible" / "ansible-core-2.17.14-cp310-x86_64-glibc2.35" / "py"
    assert "__version__ = '2.17.14'" in (py / "ansible" / "release.py").read_text()
    # The compiled parts are CPython 3.10's (what Ubuntu 22.04's python3 imports).
    assert list((py / "yaml").glob("_yaml.cpython-310-x86_64-linux-gnu.so"))
    assert list((py / "markupsafe").glob("_speedups.cpython-310-x86_64-linux-gnu.so"))
    names = {name for _, name in relay.shipped_payload(shipped)}
    assert {"py/ansible", "py/jinja2", "py/yaml", "py/cryptography", "py/resolvelib"} <= names
    assert "collections/ansible_collections/community/general" in names and "py/ansible_test" not in names
    # Made once: a second configure reads the cache without pip.
    monkeypatch.setattr(head_ansible.subprocess, "run", lambda *a, **k: pytest.fail("pip ran again"))
    assert head_ansible.for_head(JAMMY, ours=OURS) == shipped


def test_a_noble_head_gets_this_machines_release_built_for_python_3_12(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    shipped = head_ansible.for_head(NOBLE, ours=head_ansible.runner_release())
    assert shipped.release == head_ansible.runner_release() and shipped.downloaded
    assert list((shipped.site_packages / "yaml").glob("_yaml.cpython-312-x86_64-linux-gnu.so"))


def test_a_failed_download_names_the_release_and_the_heads_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(
        head_ansible.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "ERROR: No matching distribution found"),
    )
    with pytest.raises(NoAnsibleForHead) as caught:
        head_ansible.for_head(JAMMY, ours=OURS)
    assert caught.value.message.startswith(
        "cannot download ansible-core 2.17.14 for the head's Python 3.10 (x86_64, glibc 2.35)"
    )
    assert "No matching distribution" in caught.value.message
    assert caught.value.hint is not None and "GPUFLEET_CONFIGURE_FROM=here" in caught.value.hint


def test_two_configures_at_once_download_the_heads_ansible_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clusters configured at once from one machine, both heads on Python 3.10: one pip download into
    the shared cache folder, the other waits for it (before, both ran pip into the same folder)."""
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[float] = []

    def pip(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(time.monotonic())
        time.sleep(0.5)  # a download takes a while: the other configure starts meanwhile
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(head_ansible.subprocess, "run", pip)
    with ThreadPoolExecutor(max_workers=2) as pool:
        shipped = list(pool.map(lambda _: head_ansible.for_head(JAMMY, ours=OURS), range(2)))
    assert len(calls) == 1
    assert shipped[0] == shipped[1] and shipped[0].release == "2.17.14"


def test_site_yml_and_every_role_load_under_ansible_core_2_17(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a Python 3.10 head runs: ansible-core 2.17.14 (here on this machine's Python, inside 2.17's
    window) with nothing but the upload parses site.yml and resolves every module and collection the roles
    name; a module or keyword newer than 2.17 stops it."""
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    here = HeadPython.here()
    folder = tmp_path / "cache" / "relay-ansible" / head_ansible.cache_key("2.17.14", here)
    shipped = head_ansible.ShippedAnsible("2.17.14", head_ansible.download("2.17.14", here, folder), True)
    relay_dir = tmp_path / "relay"
    inventory = {
        "all": {"children": {"slurm_controller": {"hosts": {"h": {}}}, "compute": {"hosts": {"h": {}}}}}
    }
    data = relay.bundle(
        _inventory(), str(relay_dir), key=None, extravars={}, files={}, payload=relay.shipped_payload(shipped)
    )
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(relay_dir, filter="data")
    (relay_dir / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{relay_dir}/py",
        "ANSIBLE_CONFIG": f"{relay_dir}/ansible.cfg",
        "ANSIBLE_ROLES_PATH": f"{relay_dir}/roles",
        "ANSIBLE_COLLECTIONS_PATH": f"{relay_dir}/collections",
        "ANSIBLE_LOCAL_TEMP": f"{tmp_path}/tmp",
    }
    main = "import sys; from ansible.cli.playbook import main; sys.argv[0] = 'ansible-playbook'; main()"
    version = subprocess.run([sys.executable, "-S", "-c", main, "--version"], env=env, capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    assert "ansible-playbook [core 2.17.14]" in version.stdout, version.stdout + version.stderr
    done = subprocess.run(
        [sys.executable, "-S", "-c", main, "--syntax-check", "-i", f"{relay_dir}/hosts.yml",
         f"{relay_dir}/playbooks/site.yml"],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _inventory() -> relay.Inventory:
    from gpufleet.inventory.model import Host
    from gpufleet.spec.model import Role

    head = Host(name="h", roles=[Role.CONTROLLER, Role.COMPUTE], address="h", private_ip="10.0.0.1",
                instance_type="baremetal", cpus=2, memory_mb=2000)  # fmt: skip
    return relay.Inventory(cluster="c", provider="aws", fabric="ethernet", hosts=[head])


def test_the_relays_event_callback_runs_under_ansible_core_2_17(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Python 3.10 head's ansible-core 2.17.14 (here on this machine's Python) loads the relay's stdout
    callback (head_callback over ansible-runner's awx_display) and its events become the play's result."""
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    here = HeadPython.here()
    folder = tmp_path / "cache" / "relay-ansible" / head_ansible.cache_key("2.17.14", here)
    shipped = head_ansible.ShippedAnsible("2.17.14", head_ansible.download("2.17.14", here, folder), True)
    relay_dir = tmp_path / "relay"
    data = relay.bundle(
        _inventory(), str(relay_dir), key=None, extravars={}, files={}, payload=relay.shipped_payload(shipped)
    )
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(relay_dir, filter="data")
    local = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
    (relay_dir / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h": {}}, "vars": local}}))
    (relay_dir / "extravars.json").write_text("{}")
    tasks = [
        {"name": "Always changes", "ansible.builtin.command": "true"},
        {"name": "Says its release", "ansible.builtin.debug": {"msg": "core {{ ansible_version.full }}"}},
    ]
    play = [{"name": "Sample", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (relay_dir / "playbooks" / "sample.yml").write_text(yaml.safe_dump(play))
    # play_command runs "python3": this machine's, on whose version the download was made
    python = Path(sys.executable)

    def shell(command: str, **kwargs: object) -> tuple[int, str]:
        env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=240, check=False
        )
        on_line = kwargs.get("on_line")
        for line in (done.stdout + done.stderr).splitlines():
            if callable(on_line):
                on_line(line)
        return done.returncode, done.stdout + done.stderr

    command = relay.play_command("sample.yml", str(relay_dir), 1, None, secrets=[])
    result = relay.play(shell, command, "sample.yml", "h", SilentReporter(), tmp_path / "logs")
    assert result.changed_tasks == ["h: Always changes"] and result.stats["ok"] == {"h": 2}
    assert "core 2.17.14" in (tmp_path / "logs" / "stdout").read_text()
