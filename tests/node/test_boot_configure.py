"""The node's own configure (gpufleet.node.boot_configure): a real ansible-playbook, run as the baked unit
runs it (-c local, the relay's event callback), on a small site folder laid out as the bake lays it out."""

from __future__ import annotations

import ast
import datetime
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import source_tree
from factories import make_host, make_inventory
from gpufleet.configure import node_result, relay
from gpufleet.inventory import node_facts
from gpufleet.inventory.model import GROUP_OF_ROLE
from gpufleet.node import boot_configure
from gpufleet.spec.model import Role

HASH = "ab" * 32

PLAYBOOK = """
- name: A node's configure phase, in small
  hosts: all
  gather_facts: false
  tasks:
    - name: Read what the facts gave the play
      ansible.builtin.assert:
        that:
          - gpufleet_configure_on_node | bool
          - gpufleet_private_ip == '127.0.0.1'
          - gpufleet_cpus == 4
          - munge_key_file is defined
          - hostvars['ctl']['gpufleet_private_ip'] == '127.0.0.1'
          - inventory_hostname == 'n1'
        quiet: true
    - name: Change something
      ansible.builtin.command: "true"
    - name: An install task the phase skips
      ansible.builtin.command: "false"
      tags: [install]
    - name: Not for this node
      ansible.builtin.command: "false"
      when: false
    - name: Write the node's file
      ansible.builtin.command: "{{ step_command | default('true') }}"
      changed_when: false
"""


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "playbooks").mkdir(parents=True)
    (site / "playbooks" / "site.yml").write_text(PLAYBOOK)
    (site / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    (site / "callback_plugins").mkdir()
    shutil.copy(relay.HEAD_CALLBACK, site / "callback_plugins" / "gpufleet_events.py")
    (site / "runner_callback").mkdir()
    shutil.copy(relay.runner_callback(), site / "runner_callback" / "awx_display.py")
    return site


def _facts(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    key = tmp_path / "munge.key"
    key.write_bytes(b"k" * 1024)
    inventory = make_inventory(
        [
            make_host("ctl", [Role.CONTROLLER], ip="127.0.0.1", cpus=2),
            make_host("n1", ip="127.0.0.2", cpus=4, memory_mb=2048),
        ],
        cluster="c",
        filesystem={"kind": "volume", "mount_point": str(tmp_path / "shared")},
        baked_image_hash=HASH,
    )
    facts = node_facts.facts_for(
        inventory,
        inventory.hosts[1],
        group="gpu",
        munge_key=node_facts.MungeKeyFrom(kind="file", path=str(key)),
    ).model_dump(mode="json")
    facts["result_file"] = str(tmp_path / "var" / "configure-result.json")
    return {**facts, **changes}


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(boot_configure, "RUN_DIR", str(tmp_path / "run"))
    image = tmp_path / "baked-image"
    image.write_text(HASH + "\n")
    monkeypatch.setattr(boot_configure, "IMAGE_FILE", str(image))
    return image


def _run(tmp_path: Path, facts: dict[str, Any], image: Path, *options: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    site = _site(tmp_path)
    argv = ["--facts", str(path), "--site", str(site), *options]
    rc = boot_configure.main(argv) if image.exists() else -1
    return rc, json.loads(Path(facts["result_file"]).read_text())


def test_the_node_runs_the_configure_phase_on_itself_and_writes_every_tasks_status(
    tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = _facts(tmp_path)
    (tmp_path / "shared").mkdir()
    rc, result = _run(tmp_path, facts, node)
    assert rc == 0, result
    assert result["ok"] and result["failed"] is None and result["host"] == "n1" and result["run"] == "boot"
    assert [(t["task"], t["status"]) for t in result["tasks"]] == [
        ("Read what the facts gave the play", "ok"),
        ("Change something", "changed"),
        ("Not for this node", "skipped"),
        ("Write the node's file", "ok"),
    ]
    assert result["stats"]["changed"] == 1 and result["image"] == HASH
    # The same result on the shared filesystem, under the node's name: what gpufleet configure lists.
    shared = tmp_path / "shared" / ".gpufleet" / "configure" / "n1.json"
    assert json.loads(shared.read_text()) == result
    # What gpufleet configure reads of it: the typed reader takes the node's own document.
    read = node_result.parse(shared.read_text())
    assert isinstance(read, node_result.NodeResult) and read.changed_tasks == ["Change something"]
    # The play's own output stays beside the result.
    assert "GPUFLEET_EVENT" in Path(facts["result_file"]).with_suffix(".log").read_text()


def test_a_failed_task_is_the_results_failure_with_its_message_and_the_unit_fails(
    tmp_path: Path, node: Path
) -> None:
    facts = _facts(tmp_path)
    facts["cluster_vars"]["step_command"] = "ls /nonexistent-gpufleet-path"
    rc, result = _run(tmp_path, facts, node)
    assert rc == 1 and not result["ok"]
    assert result["failed"]["task"] == "Write the node's file"
    assert "non-zero return code" in result["failed"]["message"]
    assert "nonexistent-gpufleet-path" in result["failed"]["message"]  # the command's own words
    assert result["tasks"][-1] == {"task": "Write the node's file", "status": "failed"}


def test_a_node_of_another_image_refuses_and_says_which(tmp_path: Path, node: Path) -> None:
    node.write_text("cd" * 32 + "\n")
    rc, result = _run(tmp_path, _facts(tmp_path), node)
    assert rc == 1 and result["failed"]["task"] == "boot: image"
    assert "cdcdcdcdcdcd" in result["failed"]["message"] and "abababababab" in result["failed"]["message"]
    assert result["tasks"] == []


def test_a_rerun_asked_by_gpufleet_configure_carries_its_run_id(tmp_path: Path, node: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / boot_configure.RUN_NAME).write_text("r-42\n")
    rc, result = _run(tmp_path, _facts(tmp_path, shared_results=None), node)
    assert rc == 0 and result["run"] == "r-42"


def test_check_says_whether_the_node_has_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_metadata(*args: object, **kwargs: object) -> str:
        raise OSError("no metadata server")

    monkeypatch.setattr(boot_configure, "_http", no_metadata)
    assert boot_configure.main(["--facts", str(tmp_path / "none.json"), "--check"]) == 1
    (tmp_path / "facts.json").write_text("{}")
    assert boot_configure.main(["--facts", str(tmp_path / "facts.json"), "--check"]) == 0
    # Facts whose munge key comes by push (GCP today): the unit skips itself, configure pushes.
    (tmp_path / "facts.json").write_text(json.dumps({"munge_key": {"kind": "push"}}))
    assert boot_configure.main(["--facts", str(tmp_path / "facts.json"), "--check"]) == 1


def test_the_node_and_gpufleet_name_the_same_paths() -> None:
    assert boot_configure.FACTS_FILE == node_facts.FACTS_FILE
    assert boot_configure.METADATA_KEY == node_facts.METADATA_KEY
    assert boot_configure.RESULT_FILE == node_facts.RESULT_FILE
    assert boot_configure.EVENT_MARK == relay.EVENT_MARK


def test_the_secrets_manager_request_is_signed_as_botocore_signs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """SigV4 of GetSecretValue, checked against botocore's own signer on the same request and time."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    now = datetime.datetime(2026, 11, 27, 23, 0, 0, tzinfo=datetime.UTC)
    creds = {"AccessKeyId": "AKIDEXAMPLE", "SecretAccessKey": "secret", "Token": "session"}
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:gpufleet/c/munge-key-AbCdEf"
    url, headers, body = boot_configure.secretsmanager_request("eu-west-1", arn, creds, now)
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={
            k: v
            for k, v in headers.items()
            if k not in ("authorization", "x-amz-date", "x-amz-security-token")
        },
    )
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    signer = SigV4Auth(Credentials("AKIDEXAMPLE", "secret", "session"), "secretsmanager", "eu-west-1")
    signer.add_auth(request)
    assert headers["authorization"] == request.headers["Authorization"]
    assert json.loads(body) == {"SecretId": arn}


def test_the_node_file_runs_on_the_oldest_python_gpufleet_boots() -> None:
    """Ubuntu 22.04's 3.10: no syntax or library call newer than that (datetime.UTC is 3.11)."""
    text = Path(boot_configure.__file__).read_text()
    tree = source_tree.parse(text, "boot_configure.py", feature_version=(3, 10))
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "UTC"]


@pytest.mark.parametrize(
    ("count", "roles"), [(1, ["compute"]), (12, ["compute"]), (1, ["controller", "login"])]
)
def test_the_node_and_gpufleet_rebuild_the_specs_host_names_alike(count: int, roles: list[str]) -> None:
    from gpufleet.spec.model import ClusterSpec, NodeGroup

    group = NodeGroup.model_validate(
        {"name": "gpu", "roles": roles, "instance_type": "local", "count": count}
    )
    spec = ClusterSpec.model_construct(name="c")
    peer = node_facts.PeerGroup(
        base="c-gpu", count=count, groups=[GROUP_OF_ROLE[Role(r)] for r in roles], host_vars={}
    )
    assert peer.names() == ClusterSpec.host_names(spec, group) == boot_configure.peer_names(peer.model_dump())


def test_the_controllers_play_lists_the_compute_nodes_it_never_connects_to(tmp_path: Path) -> None:
    facts = _facts(tmp_path)
    facts.update(host="ctl", groups=["slurm_controller", "slurm_login"], controller_address=None)
    facts["peers"] = [{"base": "c-gpu", "count": 2, "groups": ["compute"], "host_vars": {"gpufleet_gpus": 8}}]
    inventory = boot_configure.local_inventory(facts, "ctl", "10.0.0.1", "/usr/bin/python3")
    children = inventory["all"]["children"]
    assert sorted(children["compute"]["hosts"]) == ["c-gpu-0", "c-gpu-1"]
    assert children["compute"]["hosts"]["c-gpu-1"] == {"gpufleet_gpus": 8}  # no address: never reached
    assert children["slurm_controller"]["hosts"]["ctl"]["ansible_connection"] == "local"


# ---- the munge key's secret: its endpoint and its errors (a local server answers as Secrets Manager does)

ARN = "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:gpufleet/c/munge-key-AbCdEf"


def test_the_request_goes_to_the_facts_endpoint_and_signs_its_host() -> None:
    """Another partition's domain (aws-cn: amazonaws.com.cn), as boto3 resolves it at gpufleet up: the URL and
    the SigV4 host are the endpoint's, not secretsmanager.<region>.amazonaws.com."""
    now = datetime.datetime(2026, 11, 28, 2, 0, 0, tzinfo=datetime.UTC)
    creds = {"AccessKeyId": "AKIDEXAMPLE", "SecretAccessKey": "secret"}
    endpoint = "https://secretsmanager.cn-north-1.amazonaws.com.cn"
    url, headers, _ = boot_configure.secretsmanager_request("cn-north-1", ARN, creds, now, endpoint)
    assert url == endpoint + "/" and headers["host"] == "secretsmanager.cn-north-1.amazonaws.com.cn"
    assert "/cn-north-1/secretsmanager/aws4_request" in headers["authorization"]


class _SecretsManager:
    """A local HTTP server answering each POST with the next (status, body) of ``answers``."""

    def __init__(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        import http.server
        import threading

        self.answers, self.asked = answers, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                status, body = outer.answers[min(outer.asked, len(outer.answers) - 1)]
                outer.asked += 1
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/x-amz-json-1.1")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.source = {
            "kind": "aws-secretsmanager",
            "secret_arn": ARN,
            "region": "cn-north-1",
            "endpoint": f"http://127.0.0.1:{self.server.server_address[1]}",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setattr(boot_configure, "RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(boot_configure, "RETRY_S", 0.01)
    monkeypatch.setattr(
        boot_configure, "_role_credentials", lambda: {"AccessKeyId": "AKID", "SecretAccessKey": "s"}
    )
    made: list[_SecretsManager] = []

    def make(answers: list[tuple[int, dict[str, Any]]]) -> _SecretsManager:
        made.append(_SecretsManager(answers))
        return made[-1]

    yield make
    for server in made:
        server.close()


NOT_FOUND = (
    400,
    {
        "__type": "ResourceNotFoundException",
        "message": "Secrets Manager can't find the specified secret value for staging label: AWSCURRENT",
    },
)


def test_a_secret_with_no_value_yet_is_waited_for_then_read(secrets: Any) -> None:
    import base64

    server = secrets([NOT_FOUND, NOT_FOUND, (200, {"SecretBinary": base64.b64encode(b"k" * 1024).decode()})])
    path = boot_configure.munge_key(server.source, wait_s=30)
    assert Path(path).read_bytes() == b"k" * 1024 and server.asked == 3


def test_a_secret_that_never_gets_its_value_says_the_last_error_and_who_puts_it(secrets: Any) -> None:
    server = secrets([NOT_FOUND])
    with pytest.raises(boot_configure.BootError) as refused:
        boot_configure.munge_key(server.source, wait_s=0.05)
    message = refused.value.message
    assert "ResourceNotFoundException" in message and "AWSCURRENT" in message, message
    assert "gpufleet up puts the value" in message, message


def test_access_denied_ends_the_wait_at_once_and_names_the_nodes_policy(secrets: Any) -> None:
    """AccessDeniedException is the role's policy: no retry mends it (urllib says only "HTTP Error 400")."""
    denied = {
        "__type": "AccessDeniedException",
        "Message": "User: arn:aws-cn:sts::1:assumed-role/n/i is not authorized to perform: "
        "secretsmanager:GetSecretValue",
    }
    server = secrets([(400, denied)])
    with pytest.raises(boot_configure.BootError) as refused:
        boot_configure.munge_key(server.source, wait_s=30)
    message = refused.value.message
    assert server.asked == 1, "access denied was retried"
    assert "AccessDeniedException" in message and "not authorized" in message, message
    assert "the node role's inline policy" in message, message


def test_an_endpoint_out_of_reach_says_a_private_subnet_needs_nat_or_an_endpoint(secrets: Any) -> None:
    import socket

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    source = {"kind": "aws-secretsmanager", "secret_arn": ARN, "region": "cn-north-1"}
    source["endpoint"] = f"http://127.0.0.1:{port}"
    with pytest.raises(boot_configure.BootError) as refused:
        boot_configure.munge_key(source, wait_s=0.05)
    message = refused.value.message
    assert "cannot reach" in message and "needs NAT or a secretsmanager VPC endpoint" in message, message


# ---- facts that do not parse: the unit fails, it is not skipped


def test_check_fails_the_unit_on_facts_that_do_not_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ExecCondition: 1-254 skip the unit "successfully", 255 fails it (systemd.service(5))."""
    broken = tmp_path / "facts.json"
    broken.write_text('{"host": "n1", ')  # cut short
    assert boot_configure.main(["--facts", str(broken), "--check"]) == 255
    assert str(broken) in capsys.readouterr().err
    broken.write_text("[1, 2]")
    assert boot_configure.main(["--facts", str(broken), "--check"]) == 255
    # GCP: the metadata key answers something that is not JSON
    monkeypatch.setattr(boot_configure, "_http", lambda *args, **kwargs: "<html>proxy error</html>")
    assert boot_configure.main(["--facts", str(tmp_path / "none.json"), "--check"]) == 255
    assert boot_configure.METADATA_KEY in capsys.readouterr().err


# ---- the play's output as it runs, and systemd's stop


@pytest.mark.parametrize(
    ("limit", "task"),
    [(None, "boot: time limit"), ("20", "boot: time limit"), ("1800", "boot: stopped")],
)
def test_the_log_shows_the_play_as_it_runs_and_a_stop_writes_why_it_stopped(
    tmp_path: Path, node: Path, limit: str | None, task: str
) -> None:
    """The log (what the local up's wait and journalctl show) has each task as it starts, not at the play's
    end; SIGTERM ends the play and the result says why, with the tasks so far: systemd at RuntimeMaxSec
    (the unit passes it as --time-limit), or a stop long before it (the node shut down: CI saw a node
    stopped 60 s into its play named "ran past its time limit")."""
    import os
    import signal
    import threading
    import time

    facts = _facts(tmp_path)
    facts["cluster_vars"]["step_command"] = "sleep 120"
    log = Path(facts["result_file"]).with_suffix(".log")
    seen: list[str] = []

    def stop_when_the_last_task_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and "Write the node's file" in log.read_text():
                seen.append(log.read_text())
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=stop_when_the_last_task_runs, daemon=True)
    watcher.start()
    started = time.monotonic()
    rc, result = _run(tmp_path, facts, node, *(["--time-limit", limit] if limit else []))
    watcher.join()
    assert seen, "the log showed no task while the play ran"
    assert time.monotonic() - started < 60  # the play was ended, not waited for
    assert rc == 1 and result["failed"]["task"] == task
    if task == "boot: time limit":
        assert result["failed"]["message"] == boot_configure.TIME_LIMIT
    else:
        assert result["failed"]["message"].startswith("systemd stopped the node's configure after ")
        assert "the node shut down or restarted" in result["failed"]["message"]
    assert result["finished"] is not None
    assert [t["task"] for t in result["tasks"]][:2] == [
        "Read what the facts gave the play",
        "Change something",
    ]
    assert signal.getsignal(signal.SIGTERM) is not boot_configure._stop  # main put the handler back


def _mountinfo(tmp_path: Path, *mounts: tuple[str, str]) -> str:
    """A /proc/self/mountinfo with the root and ``mounts`` ((point, type), in mount order)."""
    lines = ["22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw"]
    lines += [
        f"{30 + i} 22 0:{40 + i} / {point} rw shared:{2 + i} - {kind} src{i} rw"
        for i, (point, kind) in enumerate(mounts)
    ]
    table = tmp_path / "mountinfo"
    table.write_text("\n".join(lines) + "\n")
    return str(table)


def test_begin_replaces_the_last_runs_result_with_a_started_one_before_the_play(
    tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unit's ExecStartPre (--begin): the last run's result, here the "stopped" of a node shut down
    mid-play, is replaced by one that reads as started and not finished, on the node and on the shared
    filesystem, so gpufleet configure waits for this run's."""
    facts = _facts(tmp_path)
    monkeypatch.setattr(boot_configure, "MOUNTINFO", _mountinfo(tmp_path, (str(tmp_path / "shared"), "nfs4")))
    shared = Path(facts["shared_results"]) / "n1.json"
    old = {"version": 1, "host": "n1", "run": "boot", "ok": False, "failed": {"task": "boot: stopped"}}
    for path in (shared, Path(facts["result_file"])):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(old))
    rc, local = _run(tmp_path, facts, node, "--begin")
    assert rc == 0 and local["finished"] is None and local["failed"] is None and local["run"] == "boot"
    assert json.loads(shared.read_text()) == local
    read = node_result.parse(shared.read_text())
    assert isinstance(read, node_result.NodeResult) and read.running and read.image == HASH
    assert not Path(facts["result_file"]).with_suffix(".log").exists()  # no play ran


@pytest.mark.parametrize("mounts", [(), (("/elsewhere", "lustre"),), (("{shared}", "autofs"),)])
def test_begin_leaves_a_filesystem_not_mounted_yet_alone(
    tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch, mounts: tuple[tuple[str, str], ...]
) -> None:
    """Only the root filesystem under the results folder (a cloud node's play mounts the shared one), or an
    automount point there (its first access would mount it, and may hang the boot): the node's own file is
    replaced, nothing is written or made under the mount point."""
    facts = _facts(tmp_path)
    table = [(point.format(shared=str(tmp_path / "shared")), kind) for point, kind in mounts]
    monkeypatch.setattr(boot_configure, "MOUNTINFO", _mountinfo(tmp_path, *table))
    rc, local = _run(tmp_path, facts, node, "--begin")
    assert rc == 0 and local["finished"] is None
    assert not (tmp_path / "shared").exists()


def test_begin_never_fails_the_unit(tmp_path: Path, node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts that do not parse, or a shared copy the filesystem refuses: --begin says so and exits 0, so the
    play runs and names the problem itself (an ExecStartPre that fails would stop the unit before it)."""
    facts = _facts(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2")
    assert boot_configure.main(["--facts", str(broken), "--begin"]) == 0
    monkeypatch.setattr(boot_configure, "MOUNTINFO", _mountinfo(tmp_path, (str(tmp_path), "nfs4")))
    facts["shared_results"] = str(tmp_path / ("x" * 300))  # ENAMETOOLONG from the child
    rc, local = _run(tmp_path, facts, node, "--begin")
    assert rc == 0 and local["finished"] is None  # the node's own file written first, whatever comes after
