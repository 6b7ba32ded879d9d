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

from gpufleet.configure import node_result, relay
from gpufleet.inventory import node_facts
from gpufleet.inventory.model import GROUP_OF_ROLE, Host, Inventory
from gpufleet.node import boot_configure
from gpufleet.spec.model import FabricKind, Role

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
    inventory = Inventory(
        cluster="c",
        provider="local",
        fabric=FabricKind.ETHERNET,
        hosts=[
            Host(
                name="ctl",
                roles=[Role.CONTROLLER],
                address="127.0.0.1",
                private_ip="127.0.0.1",
                instance_type="local",
                cpus=2,
                memory_mb=1024,
            ),
            Host(
                name="n1",
                roles=[Role.COMPUTE],
                address="127.0.0.2",
                private_ip="127.0.0.2",
                instance_type="local",
                cpus=4,
                memory_mb=2048,
            ),
        ],
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


def _run(tmp_path: Path, facts: dict[str, Any], image: Path) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    site = _site(tmp_path)
    rc = boot_configure.main(["--facts", str(path), "--site", str(site)]) if image.exists() else -1
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
    tree = ast.parse(text, "boot_configure.py", feature_version=(3, 10))
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
