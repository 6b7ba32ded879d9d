"""Configless Slurm with dynamic nodes (roles/slurm, slurm_node_registration: dynamic, the default), rendered
by Ansible itself from an inventory: the head's slurm.conf names no node and serves its configuration, the
partition takes every node, and each compute node's slurmd unit registers it with its size and GPUs, drained
"gpufleet: not validated"; then which compute nodes configure's wait names as not registered, from sinfo's
lines as Slurm 24.11 prints them."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from path_stand_ins import stand_ins as put_stand_ins
from test_gpu_templates import PLAYBOOK, _render
from test_slurm_build_plan import slurm_filters

DROP_IN = """
    - name: Render the slurmd drop-in of each compute node
      ansible.builtin.template:
        src: "ROOT/roles/slurm/templates/slurmd-dynamic.conf.j2"
        dest: "OUT/slurmd-{{ item }}.conf"
        mode: "0644"
      loop: "{{ groups['compute'] }}"
      vars:
        inventory_hostname: "{{ item }}"
        gpufleet_cpus: "{{ hostvars[item]['gpufleet_cpus'] }}"
        gpufleet_memory_mb: "{{ hostvars[item]['gpufleet_memory_mb'] }}"
        gpufleet_gpus: "{{ hostvars[item]['gpufleet_gpus'] }}"
"""


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory) -> Path:
    import test_gpu_templates

    original = test_gpu_templates.PLAYBOOK
    test_gpu_templates.PLAYBOOK = PLAYBOOK.rstrip("\n") + "\n" + DROP_IN.strip("\n") + "\n"
    try:
        return _render(tmp_path_factory.mktemp("dynamic"), 8, "install")
    finally:
        test_gpu_templates.PLAYBOOK = original


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_the_heads_slurm_conf_serves_its_configuration_and_names_no_node(dynamic) -> None:
    lines = _lines(dynamic / "slurm.conf")
    assert "SlurmctldParameters=enable_configless" in lines
    assert "MaxNodeCount=1024" in lines
    assert "SelectType=select/cons_tres" in lines  # dynamic nodes need it (node_mgr.c)
    assert not [line for line in lines if line.startswith("NodeName")], lines
    assert "PartitionName=compute Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in lines
    # served to every node: the plugin the nodes agree on (none read here: autodetect), the GPUs' files
    assert "CgroupPlugin=autodetect" in _lines(dynamic / "cgroup.conf")
    assert "NodeName=gpu-0 Name=gpu File=/dev/nvidia[0-7]" in _lines(dynamic / "gres.conf")


def test_each_compute_node_registers_itself_drained_with_its_size_and_gpus(dynamic) -> None:
    unit = (dynamic / "slurmd-gpu-1.conf").read_text().splitlines()
    assert "[Service]" in unit and "ExecStart=" in unit  # SchedMD's ExecStart replaced, not added to
    (start,) = [line for line in unit if line.startswith("ExecStart=/")]
    # systemd splits ExecStart as a shell does double quotes (systemd.service(5), "Command lines")
    argv = shlex.split(start.removeprefix("ExecStart="))
    # -N: registered under its inventory name, whatever the machine's hostname (slurmd.c, _dynamic_init)
    assert argv[:8] == [
        "/usr/sbin/slurmd", "--systemd", "--conf-server", "10.0.0.5:6817", "-N", "gpu-1", "-Z", "--conf"
    ]  # fmt: skip
    assert argv[9:] == ["$SLURMD_OPTIONS"]
    # slurmd is ready to systemd only after its fetch: a head away past the start timeout is retried
    assert "Restart=on-failure" in unit and "RestartSec=15" in unit
    # the node line as slurmctld parses it (s_p_parse_line: key=value, a value in double quotes)
    fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', argv[8]))
    assert fields == {
        "CPUs": "192",
        "RealMemory": "1900000",
        "Gres": "gpu:8",
        "State": "DRAIN",
        "Reason": '"gpufleet: not validated"',
    }


def test_an_override_of_slurmctld_parameters_keeps_configless(tmp_path) -> None:
    """slurm_config_overrides' SlurmctldParameters is added to enable_configless: before, it replaced it,
    and slurmctld served no configuration to the dynamic nodes."""
    override = '{"slurm_config_overrides": {"SlurmctldParameters": "idle_on_node_suspend,cloud_dns"}}'
    conf = _lines(_render(tmp_path, 0, "none", "-e", override) / "slurm.conf")
    assert "SlurmctldParameters=enable_configless,idle_on_node_suspend,cloud_dns" in conf, conf
    with_values = slurm_filters().slurm_with_values
    assert with_values({"A": "enable_configless"}, "A", ["enable_configless"]) == {"A": "enable_configless"}
    assert with_values({}, "A", []) == {}
    assert with_values({"A": "x=2"}, "A", ["x=1", "y"]) == {"A": "y,x=2"}


def test_static_nodes_keep_their_node_lines(tmp_path) -> None:
    conf = _lines(_render(tmp_path, 0, "none", "-e", "slurm_node_registration=static") / "slurm.conf")
    assert "SlurmctldParameters=enable_configless" not in conf
    assert "NodeName=gpu-0 NodeAddr=10.0.1.10 CPUs=192 RealMemory=1900000 State=UNKNOWN" in conf
    assert "PartitionName=compute Nodes=gpu-0,gpu-1 Default=YES MaxTime=INFINITE State=UP" in conf


@pytest.mark.parametrize(
    ("sinfo", "missing"),
    [
        # registered: drained until validated, released, or drained by an administrator later
        ("c-0|drained|gpufleet: not validated\nc-1|idle|none\nc-2|drained|SlurmdSpoolDir is full\n", {}),
        ("c-0|mixed|none\nc-1|allocated|none\nc-2|maint|none\n", {}),
        # never registered (its slurmd did not start, or cannot reach slurmctld)
        (
            "c-0|drained|gpufleet: not validated\nc-1|idle|none\n",
            {"c-2": "slurmctld does not know it (its slurmd never registered)"},
        ),
        # registered once, not answering now; a registration slurmctld refused
        (
            "c-0|down*|Not responding\nc-1|drained*|gpufleet: not validated\nc-2|inval|none\n",
            {
                "c-0": "slurmctld lists it down* (Not responding)",
                "c-1": "slurmctld lists it drained* (gpufleet: not validated)",
                "c-2": "slurmctld lists it inval",
            },
        ),
    ],
)
def test_configure_names_every_node_that_has_not_registered(sinfo, missing) -> None:
    assert slurm_filters().slurm_registrations(sinfo, ["c-2", "c-0", "c-1"]) == missing


def test_the_served_cgroup_plugin_is_the_nodes_one_choice_or_autodetect() -> None:
    one_or = slurm_filters().slurm_one_or
    assert one_or(["cgroup/v1", "cgroup/v1"], "autodetect") == "cgroup/v1"
    assert one_or(["cgroup/v1", "cgroup/v2"], "autodetect") == "autodetect"
    assert one_or([], "autodetect") == "autodetect"


def _inventory(compute: dict[str, dict]) -> dict:
    """A controller ``head`` and ``compute``, every host this machine (connection local)."""
    import sys

    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": local,
            "children": {
                "slurm_controller": {"hosts": {"head": {}}},
                "compute": {"hosts": compute},
            },
        }
    }


CHECK = "Assert that every compute node registered"


def test_configure_fails_naming_the_node_that_never_registered_and_what_it_says(
    tmp_path, monkeypatch
) -> None:
    """verify.yml against stand-ins on PATH: slurmctld's sinfo lists c-0 drained (registered, waiting for
    validate) and not c-1, whose slurmd is inactive with a line in its log: configure fails, and says so."""
    from playbook_json import run_playbook

    log = tmp_path / "slurmd.log"
    log.write_text("[2026-11-27T20:00:00] error: fetch_config: DNS SRV lookup failed\n")
    stand_ins = {"sinfo": "echo 'c-0|drained|gpufleet: not validated'\n", "systemctl": "echo inactive\n"}
    put_stand_ins(tmp_path, monkeypatch, stand_ins)
    inventory = _inventory({"c-0": {}, "c-1": {}})
    play = [
        {
            "name": "verify",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "slurm_verify_timeout": 2,
                "slurm_config_overrides": {"SlurmdLogFile": str(log), "SlurmdSpoolDir": str(tmp_path)},
            },
            "tasks": [
                {"name": "Verify", "ansible.builtin.include_role": {"name": "slurm", "tasks_from": "verify"}}
            ],
        }
    ]
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc != 0, results
    (asserted,) = [r[CHECK] for r in results.values() if CHECK in r and not r[CHECK].get("skipped")]
    message = " ".join(asserted["msg"].split())
    assert "1 of 2 compute nodes have not registered with slurmctld" in message, message
    assert (
        "c-1: slurmctld does not know it (its slurmd never registered); on the node: slurmd is inactive"
        in message
    )
    assert "DNS SRV lookup failed" in message and "c-0:" not in message, message


def test_slurmctld_serves_the_new_plugin_stack_before_slurmd_restarts_and_verify_reads_it() -> None:
    """An unbaked first configure: slurmctld started before the containers play wrote plugstack.conf and
    serves its copy without it (fetch_config.c: a file the head lacks is removed on the node). Handlers run
    in the order they are written: reconfigure first, or a restarted slurmd fetches that copy again; and
    they run before verify's srun --help, which must offer --container-image."""
    role = Path(__file__).resolve().parents[2] / "roles" / "containers"
    handlers = yaml.safe_load((role / "handlers" / "main.yml").read_text())
    names = [h["name"] for h in handlers if h.get("listen") == "Slurm plugin stack changed"]
    reconfigure = next(
        i for i, h in enumerate(handlers) if h.get("ansible.builtin.command") == "scontrol reconfigure"
    )
    restart = next(i for i, h in enumerate(handlers) if "ansible.builtin.systemd_service" in h)
    assert reconfigure < restart, names
    tasks = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    flush = [i for i, t in enumerate(tasks) if t.get("ansible.builtin.meta") == "flush_handlers"]
    verify = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.import_tasks") == "verify.yml")
    assert (
        flush
        and flush[-1] < verify
        and flush[-1]
        > next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.import_tasks") == "configure.yml")
    ), [t["name"] for t in tasks]


def test_a_new_machine_under_a_known_name_has_the_old_record_deleted_before_it_registers(
    tmp_path, monkeypatch
):
    """tasks/replaced.yml against a stand-in scontrol: slurmctld would hand a replaced machine its name's old
    record, released (create_dynamic_reg_node runs for unknown names only). c-0 is new and its name unknown,
    c-1 new with an old record (deleted), c-2 registered before (marker: left alone), c-3's old record is in
    use: configure fails naming it and what slurmctld said."""
    from playbook_json import run_playbook

    calls = tmp_path / "calls"
    scontrol = (
        f'echo "$@" >> {calls}\n'
        'case "$2" in\n'
        "  nodename=c-1) exit 0 ;;\n"
        '  nodename=c-3) echo "delete_node $2: Requested nodes are busy" >&2; exit 1 ;;\n'
        '  *) echo "delete_node $2: Invalid node name specified" >&2; exit 1 ;;\n'
        "esac\n"
    )
    put_stand_ins(tmp_path, monkeypatch, {"scontrol": scontrol})
    spools = {node: tmp_path / node for node in ("c-0", "c-1", "c-2", "c-3")}
    for spool in spools.values():
        spool.mkdir()
    (spools["c-2"] / "gpufleet-registered").write_text("c-2\n")
    inventory = _inventory(
        {node: {"slurm_config_overrides": {"SlurmdSpoolDir": str(spool)}} for node, spool in spools.items()}
    )
    task = {"ansible.builtin.include_role": {"name": "slurm", "tasks_from": "replaced"}}
    play = [{"name": "replaced", "hosts": "compute", "gather_facts": False, "tasks": [{"name": "R", **task}]}]
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc != 0, results
    assert sorted(calls.read_text().splitlines()) == [f"delete nodename=c-{i}" for i in (0, 1, 3)]
    check = "Assert that slurmctld keeps no record of the machine this one replaces"
    failed = {host for host, tasks in results.items() if tasks.get(check, {}).get("failed")}
    assert failed == {"c-3"}, results
    message = " ".join(results["c-3"][check]["msg"].split())
    assert "c-3 is a new machine" in message and "Requested nodes are busy" in message, message


def test_new_dynamic_nodes_start_slurmd_at_once_and_one_listing_waits_for_all(tmp_path, monkeypatch) -> None:
    """tasks/register.yml against stand-ins: every new node's slurmd starts in one task, no node waiting for
    another (the chain that kept the names' order cost about 1 s a node: 17 minutes for 1,000), then one
    `sinfo` listing a second from the controller until every node started now is listed, whatever the node
    count, and each listed node gets its registration marker at once. c-1's old record was deleted just now
    (replaced.yml): its running slurmd is restarted, or it would never register again. c-2's slurmd does not
    start: nothing waits for it and it gets no marker (verify names it)."""
    from playbook_json import ROOT, run_playbook

    # service.yml leaves a dynamic node's slurmd to register.yml
    service = yaml.safe_load((ROOT / "roles" / "slurm" / "tasks" / "service.yml").read_text())
    (slurmd,) = [t for t in service if t.get("ansible.builtin.systemd_service", {}).get("name") == "slurmd"]
    assert "omit if __slurm_dynamic" in slurmd["ansible.builtin.systemd_service"]["state"], slurmd
    assert [t["when"] for t in service if t.get("ansible.builtin.include_tasks") == "register.yml"] == [
        "__slurm_dynamic | bool and __slurm_compute_hosts | length > 0"
    ], service

    calls = tmp_path / "calls"
    calls.write_text("")
    # what ansible.builtin.systemd_service reads and runs: `systemctl show <unit>`, then start or restart
    # (one host at a time: --forks 1, c-0 to c-3); c-1's slurmd runs (a stopped unit is started, not
    # restarted), and the third start, c-2's, fails
    shows = tmp_path / "shows"
    systemctl = (
        'case "$1" in\n'
        f'  show) echo >> {shows}; [ "$(wc -l < {shows})" = 2 ] && active=active || active=inactive\n'
        "    printf 'Id=slurmd.service\\nLoadState=loaded\\nActiveState=%s\\nSubState=dead\\n"
        "UnitFileState=enabled\\n' $active ;;\n"
        f'  start|restart) echo "$1" >> {calls}; [ "$(grep -c start {calls})" != 3 ] ;;\n'
        "esac\n"
    )
    # slurmctld lists the started nodes from its second listing on
    sinfo = (
        f'echo "sinfo $*" >> {calls}\n[ "$(grep -c ^sinfo {calls})" -lt 2 ] || printf "c-0\\nc-1\\nc-3\\n"\n'
    )
    put_stand_ins(tmp_path, monkeypatch, {"systemctl": systemctl, "sinfo": sinfo})
    spools = {node: tmp_path / node for node in ("c-0", "c-1", "c-2", "c-3")}
    for spool in spools.values():
        spool.mkdir()
    inventory = _inventory(
        {node: {"slurm_config_overrides": {"SlurmdSpoolDir": str(spool)}} for node, spool in spools.items()}
    )
    inventory["all"]["children"]["compute"]["hosts"]["c-1"]["__slurm_forgotten"] = {"changed": True}
    task = {"ansible.builtin.include_role": {"name": "slurm", "tasks_from": "register"}}
    play = [{"name": "register", "hosts": "all", "gather_facts": False, "tasks": [{"name": "R", **task}]}]
    rc, results = run_playbook(tmp_path, inventory, play, "--forks", "1")
    assert rc == 0, results
    listing = "sinfo --noheader --Node --format=%N"
    assert calls.read_text().splitlines() == ["start", "restart", "start", "start", listing, listing]
    marked = sorted(node for node, spool in spools.items() if (spool / "gpufleet-registered").exists())
    assert marked == ["c-0", "c-1", "c-3"]
    assert (spools["c-3"] / "gpufleet-registered").read_text() == "c-3\n"


def test_the_listing_wait_ends_by_the_clock_when_each_sinfo_is_slow(tmp_path, monkeypatch) -> None:
    """Against a slurmctld that is down each sinfo takes about 10 s (Slurm 24.11.5 _open_controller), so a
    count of tries a second apart stretches tenfold: the wait ends at its deadline, whatever each try took.
    Here each sinfo takes 2 s and never lists the node, the timeout is 4 s: one or two tries (the
    machine's load decides), not a count's five."""
    from playbook_json import run_playbook

    calls = tmp_path / "calls"
    calls.write_text("")
    systemctl = (
        'case "$1" in\n'
        "  show) printf 'Id=slurmd.service\\nLoadState=loaded\\nActiveState=inactive\\nSubState=dead\\n"
        "UnitFileState=enabled\\n' ;;\n"
        "esac\n"
    )
    sinfo = f"echo sinfo >> {calls}\nsleep 2\n"
    put_stand_ins(tmp_path, monkeypatch, {"systemctl": systemctl, "sinfo": sinfo})
    spool = tmp_path / "c-0"
    spool.mkdir()
    inventory = _inventory(
        {"c-0": {"slurm_config_overrides": {"SlurmdSpoolDir": str(spool)}, "slurm_verify_timeout": 4}}
    )
    task = {"ansible.builtin.include_role": {"name": "slurm", "tasks_from": "register"}}
    play = [{"name": "register", "hosts": "all", "gather_facts": False, "tasks": [{"name": "R", **task}]}]
    rc, results = run_playbook(tmp_path, inventory, play)
    assert rc == 0, results
    assert 1 <= len(calls.read_text().splitlines()) <= 2, (calls.read_text(), results)
    assert not (spool / "gpufleet-registered").exists()  # never listed: no marker (verify names it)


def test_a_new_machines_wait_for_slurmctld_ends_by_the_clock(tmp_path, monkeypatch) -> None:
    """tasks/replaced.yml in a node's own play: scontrol against a slurmctld that is down takes seconds of its
    own (about 10 s: Slurm 24.11.5 _open_controller), so the wait ends at its deadline, not after a count of
    tries 5 s apart. Here each scontrol takes 4 s, the budget is 10 s: two tries, not a count's three."""
    from playbook_json import run_playbook

    calls = tmp_path / "calls"
    scontrol = (
        f'echo "$@" >> {calls}\nsleep 4\n'
        'echo "Unable to contact slurm controller (connect failure)" >&2\nexit 1\n'
    )
    put_stand_ins(tmp_path, monkeypatch, {"scontrol": scontrol})
    spool = tmp_path / "c-0"
    spool.mkdir()
    inventory = _inventory({"c-0": {"slurm_config_overrides": {"SlurmdSpoolDir": str(spool)}}})
    inventory["all"]["vars"]["gpufleet_configure_on_node"] = True
    inventory["all"]["children"]["slurm_controller"]["hosts"]["head"] = {"gpufleet_private_ip": "127.0.0.1"}
    task = {"ansible.builtin.include_role": {"name": "slurm", "tasks_from": "replaced"}}
    play = [{"name": "replaced", "hosts": "c-0", "gather_facts": False, "tasks": [{"name": "R", **task}]}]
    rc, results = run_playbook(tmp_path, inventory, play, "-e", "__slurm_registration_timeout=10")
    assert rc != 0, results  # the record was not deleted: the assert says so
    assert calls.read_text().splitlines() == ["delete nodename=c-0"] * 2, (calls.read_text(), results)
    check = "Assert that slurmctld keeps no record of the machine this one replaces"
    assert "Unable to contact" in results["c-0"][check]["msg"], results
