"""Configure from the head node (GPUFLEET_CONFIGURE_FROM=head): what gpufleet's machine does must not grow
with the node count, the head's inventory reaches the nodes over the private network, and the head's
ansible-playbook events (real output, tests/configure/data/SOURCES.md) become the play's result through the
parser of a play run from here (``runner.PlayEvents``)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from factories import HEAD_ROLES, make_host, make_inventory
from gpufleet.configure import relay
from gpufleet.configure.head_ansible import HeadPython, NoAnsibleForHead
from gpufleet.errors import ConfigureError, ExitCode
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.inventory.stack import from_stack_outputs
from gpufleet.node import FOLDER as NODE_FILES
from gpufleet.progress import SilentReporter

DATA = Path(__file__).parent / "data"
# What an SSM tunnel looks like in a cloud inventory (gpufleet.infra.aws): every node behind it.
TUNNEL = "-o ProxyCommand='aws ssm start-session --target %h --document-name AWS-StartSSHSession'"


def fleet(compute: int) -> Inventory:
    head = make_host(
        "p5-controller",
        HEAD_ROLES,
        address="i-0head",
        private_ip="10.0.0.10",
        instance_type="baremetal",
        cpus=8,
        memory_mb=32000,
    )
    nodes = [
        make_host(
            f"p5-compute-{i}",
            address=f"i-0{i:05d}",
            private_ip=f"10.0.{1 + i // 250}.{10 + i % 250}",
            instance_type="baremetal",
            cpus=192,
            memory_mb=2000000,
        )
        for i in range(compute)
    ]
    return make_inventory(
        [head, *nodes],
        cluster="p5",
        provider="aws",
        connection=Connection(
            user="ubuntu", private_key_file="/state/p5/ssh/id_ed25519", ssh_common_args=TUNNEL, become=True
        ),
        baked_image_hash="abc123",
    )


@dataclass
class FakeHead:
    """Models the head node as seen through ssh: a shell with $HOME /home/ubuntu, a python3 at this
    interpreter's version and platform unless ``python`` says otherwise (the probe's line), ``nproc`` cores;
    tar unpacks the upload into ``disk``; ansible-playbook
    prints ``output`` (real ansible-playbook output) and exits ``rc``."""

    disk: Path
    output: str
    rc: int = 0
    cores: int = 2
    python: str = ""
    calls: list[str] = field(default_factory=list)
    uploads: list[bytes] = field(default_factory=list)

    def __call__(
        self, command: str, *, stdin: bytes | None = None, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str]:
        self.calls.append(command)
        if command.startswith("printf"):
            here = HeadPython.here()
            python = self.python or f"{here.major} {here.minor} {here.machine} {here.glibc}"
            return 0, f"/home/ubuntu\n{python}\n{self.cores}\n"
        if "tar -xzf -" in command:
            assert stdin is not None
            self.uploads.append(stdin)
            with tarfile.open(fileobj=io.BytesIO(stdin), mode="r:gz") as archive:
                archive.extractall(self.disk, filter="data")
            return 0, ""
        for line in self.output.splitlines():
            if on_line is not None:
                on_line(line)
        return self.rc, self.output


def run(inventory: Inventory, head: FakeHead, tmp_path: Path) -> relay.PlayResult:
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    munge = tmp_path / "munge.key"
    munge.write_bytes(b"\0" * 1024)
    return relay.run_on_head(
        "site.yml",
        inventory,
        SilentReporter(),
        shell=head,
        key_file=key,
        extravars={},
        files={"munge_key_file": munge},
        log_dir=tmp_path / "logs",
        skip_tags="install",
        payload=[],
    )


def test_the_switch_is_auto_unless_set_and_a_wrong_value_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(relay.SWITCH, raising=False)
    assert relay.chosen() == "auto"
    monkeypatch.setenv(relay.SWITCH, "head")
    assert relay.chosen() == "head"
    monkeypatch.setenv(relay.SWITCH, "controller")
    with pytest.raises(ConfigureError) as caught:
        relay.chosen()
    assert caught.value.message == "GPUFLEET_CONFIGURE_FROM='controller' is not one of auto, here, head"
    assert caught.value.hint is not None and "unset GPUFLEET_CONFIGURE_FROM" in caught.value.hint


@pytest.mark.parametrize(
    ("choice", "provider", "baked", "head"),
    [
        ("auto", "aws", "abc", True),
        ("auto", "gcp", "abc", True),
        ("auto", "aws", None, False),  # the install phase reads this machine's downloads
        ("auto", "local", "abc", False),  # local and bare metal keep Ansible here
        ("auto", "baremetal", "abc", False),
        ("here", "aws", "abc", False),
        ("head", "local", "abc", True),
    ],
)
def test_auto_runs_from_the_head_on_cloud_clusters_of_baked_nodes(
    choice: str, provider: str, baked: str | None, head: bool
) -> None:
    inventory = fleet(2).model_copy(update={"provider": provider})
    assert relay.runs_on_head(choice, inventory, baked) is head


def test_the_head_reaches_every_node_at_its_private_ip_without_the_tunnel() -> None:
    head = relay.head_inventory(fleet(3), "/home/ubuntu/.gpufleet-relay/p5")
    assert [h.address for h in head.hosts] == ["10.0.0.10", "10.0.1.10", "10.0.1.11", "10.0.1.12"]
    assert head.connection.private_key_file == "/home/ubuntu/.gpufleet-relay/p5/id_cluster"
    assert "ProxyCommand" not in (head.connection.ssh_common_args or "")
    assert "UserKnownHostsFile=/home/ubuntu/.gpufleet-relay/p5/known_hosts" in (
        head.connection.ssh_common_args or ""
    )
    assert head.connection.user == "ubuntu" and head.connection.become
    assert head.baked_image_hash == "abc123" and head.extra_vars == {}


@pytest.mark.parametrize("compute", [2, 1024])
def test_what_this_machine_does_is_three_calls_to_the_head_whatever_the_node_count(
    compute: int, tmp_path: Path
) -> None:
    disk = tmp_path / "head"
    head = FakeHead(disk, (DATA / "head_ansible_playbook_ok.out").read_text())
    run(fleet(compute), head, tmp_path)
    # The probe, the one upload, the one ansible-playbook: nothing per node on this machine.
    assert len(head.calls) == 3 and len(head.uploads) == 1
    assert head.calls[0].startswith("printf")
    assert "tar -xzf - -C /home/ubuntu/.gpufleet-relay/p5" in head.calls[1]
    assert "--forks " + str(min(compute + 1, 16)) in head.calls[2]  # 8 per core on a 2-core head
    assert "--skip-tags install" in head.calls[2]
    with tarfile.open(fileobj=io.BytesIO(head.uploads[0]), mode="r:gz") as archive:
        names = set(archive.getnames())
    # The upload's members do not depend on N: only inventory.yml's length does.
    assert {"inventory.yml", "extravars.json", "id_cluster", "munge.key", "ansible.cfg"} <= names
    assert "playbooks/site.yml" in names and "roles/slurm/tasks/main.yml" in names
    inventory = yaml.safe_load((disk / "inventory.yml").read_text())
    hosts = inventory["all"]["children"]["compute"]["hosts"]
    assert len(hosts) == compute
    assert hosts["p5-compute-0"]["ansible_host"] == "10.0.1.10"
    extravars = yaml.safe_load((disk / "extravars.json").read_text())
    assert extravars == {"munge_key_file": "/home/ubuntu/.gpufleet-relay/p5/munge.key"}
    # The copies of the cluster's key and the munge key are removed however the play ends.
    assert head.calls[2].endswith(
        "; rc=$?; rm -f /home/ubuntu/.gpufleet-relay/p5/id_cluster /home/ubuntu/.gpufleet-relay/p5/munge.key"
        "; exit $rc"
    )


def test_the_same_upload_for_2_and_1024_nodes_but_the_inventory(tmp_path: Path) -> None:
    members = []
    for compute in (2, 1024):
        head = FakeHead(tmp_path / str(compute), (DATA / "head_ansible_playbook_ok.out").read_text())
        run(fleet(compute), head, tmp_path)
        with tarfile.open(fileobj=io.BytesIO(head.uploads[0]), mode="r:gz") as archive:
            members.append({m.name: m.size for m in archive.getmembers() if m.name != "inventory.yml"})
    assert members[0] == members[1]


def test_the_heads_output_becomes_the_play_result(tmp_path: Path) -> None:
    head = FakeHead(tmp_path / "head", (DATA / "head_ansible_playbook_ok.out").read_text())
    result = run(fleet(2), head, tmp_path)
    assert result.ok and result.changed == 6  # the stats' changed per host, summed
    assert result.changed_tasks == [
        "t-compute-0: Always changes",
        "t-compute-1: Always changes",
        "t-controller: Always changes",
    ]
    assert result.failures == []  # the three failures were ignored (ignore_errors: '...ignoring')
    assert result.stats["ok"] == {"t-compute-0": 3, "t-compute-1": 3, "t-controller": 3}
    assert (tmp_path / "logs" / "stdout").read_text().startswith("\nPLAY [Sample]")


def test_a_failed_task_on_a_node_is_named_with_its_message_and_where_the_log_is(tmp_path: Path) -> None:
    head = FakeHead(tmp_path / "head", (DATA / "head_ansible_playbook_failed.out").read_text(), rc=2)
    with pytest.raises(ConfigureError) as caught:
        run(fleet(2), head, tmp_path)
    error = caught.value
    assert error.exit_code == ExitCode.CONFIGURE
    assert error.message == (
        "site.yml failed (status failed on the head node, exit 2):\n"
        "  - t-compute-1: Munge credential decodes: non-zero return code: munge: Error: Invalid credential"
    )
    assert error.hint is not None and f"{tmp_path / 'logs'}/stdout" in error.hint


def test_a_head_whose_python_no_ansible_core_supports_is_refused_before_anything_is_shipped(
    tmp_path: Path,
) -> None:
    head = FakeHead(tmp_path / "head", "", python="3 8 x86_64 2.31")
    with pytest.raises(NoAnsibleForHead) as caught:
        run(fleet(2), head, tmp_path)
    assert caught.value.message.startswith(
        "the head node p5-controller: the head's python3 is 3.8, which no ansible-core gpufleet ships "
        "supports as a controller (ansible-core 2.16 3.10-3.12, 2.17 3.10-3.12, 2.18 3.11-3.13"
    ), caught.value.message
    assert len(head.calls) == 1 and not head.uploads


def test_auto_falls_back_to_here_on_a_head_no_ansible_core_runs_on_before_anything_is_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = FakeHead(tmp_path / "head", "", python="3 8 x86_64 2.31")
    monkeypatch.setattr(relay, "SshShell", lambda inventory: head)
    lines: list[str] = []

    class Notes(SilentReporter):
        def info(self, message: str) -> None:
            lines.append(message)

    munge = tmp_path / "munge.key"
    munge.write_bytes(b"\0" * 1024)
    args = (fleet(2), munge, tmp_path / "logs", Notes())
    assert relay.configure_on_head(*args, baked="abc", required=False) is None
    assert len(head.calls) == 1 and not head.uploads
    assert any("python3 is 3.8" in line and "runs from this machine instead" in line for line in lines)
    with pytest.raises(NoAnsibleForHead):  # the switch set to head: an error, as before
        relay.configure_on_head(*args, baked="abc", required=True)


def test_a_head_without_python3_is_named_with_what_the_probe_said(tmp_path: Path) -> None:
    class NoPython(FakeHead):
        def __call__(self, command: str, **kwargs: object) -> tuple[int, str]:  # type: ignore[override]
            self.calls.append(command)
            # bash over ssh when python3 is missing: the && chain stops there, exit 127
            return 127, "/home/ubuntu\nbash: line 1: python3: command not found\n"

    head = NoPython(tmp_path / "head", "")
    with pytest.raises(ConfigureError) as caught:
        run(fleet(2), head, tmp_path)
    assert caught.value.message.startswith(
        "cannot run Ansible on the head node p5-controller: the probe exited 127"
    )
    assert "python3: command not found" in caught.value.message
    assert caught.value.hint is not None and "unset GPUFLEET_CONFIGURE_FROM" in caught.value.hint


def test_only_a_baked_configure_runs_from_the_head(tmp_path: Path) -> None:
    with pytest.raises(ConfigureError) as caught:
        relay.configure_on_head(fleet(2), tmp_path / "munge.key", tmp_path, SilentReporter(), baked=None)
    assert "runs only the configure phase" in caught.value.message
    assert caught.value.hint is not None and "gpufleet image build SPEC" in caught.value.hint


def test_this_machines_ansible_core_and_the_roles_collections_are_what_is_shipped() -> None:
    payload = dict((name, source) for source, name in relay.ansible_payload(relay.site_packages()))
    assert {"py/ansible", "py/jinja2", "py/yaml", "py/resolvelib", "py/packaging"} <= set(payload)
    assert "collections/ansible_collections/ansible/posix" in payload
    assert (payload["py/ansible"] / "cli" / "playbook.py").exists()
    # ansible-core reads Jinja2's version through importlib.metadata: without its dist-info it stops.
    assert any(name.startswith("py/jinja2-") and name.endswith(".dist-info") for name in payload)


def test_the_shipped_ansible_runs_site_yml_with_nothing_but_the_upload(tmp_path: Path) -> None:
    """The head has only python3 and the upload: the shipped Ansible alone (no site-packages: -S) parses
    site.yml with every role, and finds the collections' modules the roles name."""
    import subprocess
    import sys

    folder = tmp_path / "relay"
    data = relay.bundle(
        fleet(2),
        str(folder),
        key=b"key",
        extravars={},
        files={},
        payload=relay.ansible_payload(relay.site_packages()),
    )
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(folder, filter="data")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{folder}/py",
        "ANSIBLE_CONFIG": f"{folder}/ansible.cfg",
        "ANSIBLE_ROLES_PATH": f"{folder}/roles",
        "ANSIBLE_COLLECTIONS_PATH": f"{folder}/collections",
        "ANSIBLE_LOCAL_TEMP": f"{tmp_path}/tmp",
    }
    main = "import sys; from ansible.cli.playbook import main; sys.argv[0] = 'ansible-playbook'; main()"
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            main,
            "--syntax-check",
            "-i",
            f"{folder}/inventory.yml",
            f"{folder}/playbooks/site.yml",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "playbook: " in done.stdout


def test_the_node_files_are_shipped_and_the_heads_inventory_points_at_them(tmp_path: Path) -> None:
    """The monitoring role copies slurm_exporter.py and the GPU roles the node check from
    gpufleet_node_files: without them the head's play failed on every node ("Could not find or access ...
    slurm_exporter.py", the local cluster test of 2026-11-25)."""
    data = relay.bundle(fleet(2), str(tmp_path / "head"), key=None, extravars={}, files={}, payload=[])
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(tmp_path / "head", filter="data")
    shipped = yaml.safe_load((tmp_path / "head" / "inventory.yml").read_text())["all"]["vars"]
    folder = Path(shipped["gpufleet_node_files"])
    assert folder == tmp_path / "head" / relay.NODE_FOLDER
    for name in ("node_health.py", "slurm_exporter.py"):
        assert (folder / name).read_bytes() == (NODE_FILES / name).read_bytes()


def test_forks_follow_the_heads_cores_not_this_machines() -> None:
    assert relay.forks_for(cores=2, hosts=1025) == 16
    assert relay.forks_for(cores=96, hosts=1025) == 512
    assert relay.forks_for(cores=96, hosts=5) == 5


@pytest.mark.parametrize("example", ["aws-p5.yaml", "gcp-a3-mega.yaml"])
def test_each_clouds_inventory_under_the_mocks_drives_the_head(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inventory a cloud program's outputs make (Pulumi's mocks), with the cloud backend's own
    connection (its SSM or IAP ProxyCommand): three calls to the head, every node at its private IP."""
    from datetime import UTC, datetime

    from gpufleet.infra.backend import backend_for
    from gpufleet.infra.program import plan_spec
    from gpufleet.spec import load_spec
    from gpufleet.state import ClusterState

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / example)
    state = ClusterState.for_name(spec.name)
    state.ssh_dir.mkdir(parents=True)
    connection = backend_for(spec).connection(spec, state)
    outputs = plan_spec(spec, datetime(2026, 11, 24, 9, 0, tzinfo=UTC)).outputs
    inventory = from_stack_outputs(outputs, connection=connection)
    assert "ProxyCommand" in (inventory.connection.ssh_common_args or "")  # the tunnel this machine uses
    head = FakeHead(tmp_path / "head", (DATA / "head_ansible_playbook_ok.out").read_text())
    run(inventory, head, tmp_path)
    assert len(head.calls) == 3
    shipped = yaml.safe_load((tmp_path / "head" / "inventory.yml").read_text())["all"]
    assert "ProxyCommand" not in shipped["vars"]["ansible_ssh_common_args"]
    hosts = {name: data for group in shipped["children"].values() for name, data in group["hosts"].items()}
    assert {name: data["ansible_host"] for name, data in hosts.items()} == {
        host.name: host.private_ip for host in inventory.hosts
    }
    assert shipped["vars"]["ansible_become"] is True and shipped["vars"]["ansible_user"] == connection.user


@pytest.mark.parametrize(
    ("switch", "provider", "where"),
    [
        (None, "aws", "head"),
        (None, "local", "here"),
        ("here", "aws", "here"),
        ("head", "aws", "head"),
        ("head", "local", "head"),
    ],
)
def test_gpufleet_configure_takes_the_head_path_when_the_switch_or_auto_says_so(
    switch: str | None, provider: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    from gpufleet import pipeline
    from gpufleet.bake import baker
    from gpufleet.configure import runner
    from gpufleet.configure.runner import PlayResult
    from gpufleet.spec import load_spec

    if switch is None:
        monkeypatch.delenv(relay.SWITCH, raising=False)
    else:
        monkeypatch.setenv(relay.SWITCH, switch)
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "local.yaml")
    inventory = fleet(2).model_copy(update={"provider": provider})
    called: list[tuple[str, object]] = []

    class State:
        logs_dir = tmp_path / "logs"
        inventory_file = tmp_path / "inventory.yml"

        def ensure_munge_key(self) -> Path:
            return tmp_path / "munge.key"

        def mark(self, *args: object, **kwargs: object) -> None:
            called.append(("mark", args))

    monkeypatch.setattr(pipeline, "load_inventory", lambda spec, command=None: (State(), inventory))
    monkeypatch.setattr(pipeline, "tracked", lambda state, phase: contextlib.nullcontext())
    monkeypatch.setattr(baker, "baked_and_current", lambda spec, extra: "abc123")

    def on_head(
        inv: Inventory, munge: Path, logs: Path, reporter: object, *, baked: str | None, required: bool
    ) -> PlayResult:
        assert required is (switch == "head")
        called.append(("head", (inv.cluster, munge, logs, baked)))
        return PlayResult(ok=True, changed=0)

    def here(playbook: str, inventory_file: Path, *args: object, **kwargs: object) -> PlayResult:
        called.append(("here", (playbook, kwargs["skip_tags"])))
        return PlayResult(ok=True, changed=0)

    monkeypatch.setattr(relay, "configure_on_head", on_head)
    monkeypatch.setattr(runner, "run_playbook", here)
    result = pipeline.configure(spec, SilentReporter())
    assert result.install_phase == "skipped: baked image abc123"
    if where == "head":
        assert called[0] == (
            "head",
            ("p5", tmp_path / "munge.key", tmp_path / "logs" / "ansible-head", "abc123"),
        )
    else:
        assert called[0] == ("here", ("site.yml", "install"))


def test_the_shipped_callback_turns_a_real_play_into_the_play_result(tmp_path: Path) -> None:
    """ansible-playbook from the upload alone, with the shipped callback (head_callback, ansible-runner's
    awx_display), over three hosts with the local connection: its events are read by runner.PlayEvents,
    an ignored failure is no failure, and a failed task fails the play with its own words."""
    import subprocess

    folder = tmp_path / "relay"
    data = relay.bundle(
        fleet(2),
        str(folder),
        key=None,
        extravars={},
        files={},
        payload=relay.ansible_payload(relay.site_packages()),
    )
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        archive.extractall(folder, filter="data")
    hosts = {name: {} for name in ("t-controller", "t-compute-0", "t-compute-1")}
    local = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
    (folder / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": local}}))
    (folder / "extravars.json").write_text("{}")
    command = {
        "ansible.builtin.command": {"argv": ["sh", "-c", "echo munge: Error: Invalid credential >&2; exit 1"]}
    }
    tasks = [
        {"name": "Always changes", "ansible.builtin.command": "true"},
        {"name": "Fails but is ignored", "ansible.builtin.command": "false", "ignore_errors": True},
        {"name": "Munge credential decodes", **command, "when": "inventory_hostname == 't-compute-1'"},
    ]
    (folder / "playbooks" / "sample.yml").write_text(
        yaml.safe_dump([{"name": "Sample", "hosts": "all", "gather_facts": False, "tasks": tasks}])
    )

    def shell(
        command: str, *, stdin: bytes | None = None, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=240, check=False
        )
        for line in (done.stdout + done.stderr).splitlines():
            if on_line is not None:
                on_line(line)
        return done.returncode, done.stdout + done.stderr

    command_line = relay.play_command("sample.yml", str(folder), 3, None, secrets=[])
    with pytest.raises(ConfigureError) as caught:
        relay.play(shell, command_line, "sample.yml", "t-controller", SilentReporter(), tmp_path / "logs")
    assert caught.value.message == (
        "sample.yml failed (status failed on the head node, exit 2):\n"
        "  - t-compute-1: Munge credential decodes: non-zero return code: munge: Error: Invalid credential"
    ), caught.value.message
    log = (tmp_path / "logs" / "stdout").read_text()
    assert "TASK [Always changes]" in log and "GPUFLEET_EVENT" not in log and "\x1b[K" not in log
    tasks.pop()  # without the failing task: the play passes, the ignored failures are none
    (folder / "playbooks" / "sample.yml").write_text(
        yaml.safe_dump([{"name": "Sample", "hosts": "all", "gather_facts": False, "tasks": tasks}])
    )
    result = relay.play(
        shell, command_line, "sample.yml", "t-controller", SilentReporter(), tmp_path / "logs"
    )
    assert result.ok and result.changed == 6 and result.failures == []
    assert sorted(result.changed_tasks) == [f"{host}: Always changes" for host in sorted(hosts)]
    assert result.stats["ok"] == {host: 2 for host in hosts} and result.stats["ignored"] == {
        host: 1 for host in hosts
    }
