"""roles/monitoring without a cluster: the scrape targets it renders from an inventory (checked by promtool),
the GPU exporter each node gets, and the refusals of its preflight (the stand-in off the local backend)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.roles.playbook_json import ROOT, run_playbook

from gpufleet.inventory.model import FabricKind, Host, Inventory, Role

ROLE = ROOT / "roles" / "monitoring"


def inventory(provider: str, instance_type: str, gpus: int, **extra: Any) -> dict[str, Any]:
    def host(name: str, roles: list[Role], ip: str, compute: bool) -> Host:
        return Host(
            name=name,
            roles=roles,
            address=ip,
            private_ip=ip,
            instance_type=instance_type if compute else "local" if provider == "local" else "m7i.2xlarge",
            gpus=gpus if compute else 0,
            cpus=2,
            memory_mb=2048,
        )

    inv = Inventory(
        cluster="mon",
        provider=provider,
        fabric=FabricKind.ETHERNET,
        hosts=[
            host("mon-ctl", [Role.CONTROLLER, Role.LOGIN], "10.9.0.2", False),
            host("mon-c0", [Role.COMPUTE], "10.9.0.3", True),
            host("mon-c1", [Role.COMPUTE], "10.9.0.4", True),
        ],
        software={"monitoring": True},
    ).to_ansible()
    # The local backend's nodes are containers (infra/local/cluster.py sets the fact the roles read).
    container = {"gpufleet_node_is_container": True} if provider == "local" else {}
    inv["all"]["vars"].update(
        {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **container, **extra}
    )
    return inv


def render_play(out: Path) -> list[dict[str, Any]]:
    return [
        {
            "name": "Render the monitoring role's files",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"ansible_facts": {"os_family": "Debian"}},
            "tasks": [
                {
                    "name": "Preflight",
                    "ansible.builtin.include_role": {
                        "name": "monitoring",
                        "tasks_from": "preflight.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Load the OS's variables",
                    "ansible.builtin.include_vars": str(ROLE / "vars" / "Debian.yml"),
                },
                {
                    "name": "Render prometheus.yml",
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates" / "prometheus.yml.j2"),
                        "dest": str(out / "prometheus.yml"),
                        "mode": "0644",
                    },
                    "when": "inventory_hostname in groups['slurm_controller']",
                },
                {
                    "name": "Render the job exporter unit",
                    "ansible.builtin.template": {
                        "src": str(ROLE / "templates" / "gpufleet-job-exporter.service.j2"),
                        "dest": str(out / "{{ inventory_hostname }}-job-exporter.service"),
                        "mode": "0644",
                    },
                    "when": "inventory_hostname in groups['compute']",
                },
                {
                    "name": "Show",
                    "ansible.builtin.debug": {"msg": "{{ monitoring_gpu_exporter }} {{ __monitoring_run }}"},
                },
            ],
        }
    ]


def scrape_targets(path: Path) -> dict[str, list[tuple[str, dict[str, str]]]]:
    config = yaml.safe_load(path.read_text())
    return {
        job["job_name"]: [(t, c.get("labels", {})) for c in job["static_configs"] for t in c["targets"]]
        for job in config["scrape_configs"]
    }


def test_local_cluster_targets_and_the_stand_in(tmp_path: Path) -> None:
    code, results = run_playbook(tmp_path, inventory("local", "local", 0), render_play(tmp_path))
    assert code == 0, results
    targets = scrape_targets(tmp_path / "prometheus.yml")
    assert targets["node"] == [
        ("10.9.0.3:9100", {"node": "mon-c0", "instance_type": "local"}),
        ("10.9.0.4:9100", {"node": "mon-c1", "instance_type": "local"}),
        ("10.9.0.2:9100", {"node": "mon-ctl", "instance_type": "local"}),
    ]
    assert [t for t, _ in targets["gpufleet-jobs"]] == ["10.9.0.3:9342", "10.9.0.4:9342"]
    assert targets["slurm"] == [("10.9.0.2:9341", {})]
    assert "dcgm" not in targets
    unit = (tmp_path / "mon-c0-job-exporter.service").read_text()
    assert "--mode node --port 9342 --node mon-c0 --simulate-dcgm 1 --cpus-per-gpu 1.0" in unit
    assert (
        results["mon-c0"]["Show"]["msg"] == "simulated ['prometheus-node-exporter', 'gpufleet-job-exporter']"
    )
    assert results["mon-ctl"]["Show"]["msg"] == (
        "simulated ['prometheus-node-exporter', 'prometheus', 'prometheus-alertmanager', "
        "'gpufleet-slurm-exporter']"
    )


def test_gpu_cluster_scrapes_dcgm_exporter(tmp_path: Path) -> None:
    code, results = run_playbook(tmp_path, inventory("aws", "p5.48xlarge", 8), render_play(tmp_path))
    assert code == 0, results
    targets = scrape_targets(tmp_path / "prometheus.yml")
    assert targets["dcgm"] == [("10.9.0.3:9400", {"node": "mon-c0"}), ("10.9.0.4:9400", {"node": "mon-c1"})]
    assert {labels["instance_type"] for _t, labels in targets["node"]} == {"p5.48xlarge", "m7i.2xlarge"}
    assert "--simulate-dcgm" not in (tmp_path / "mon-c0-job-exporter.service").read_text()
    assert results["mon-c0"]["Show"]["msg"].startswith("dcgm ")


def _config_validate() -> list[str]:
    """The validate command the role runs on prometheus.yml, as argv with %s left in."""
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    block = next(task for task in tasks if "block" in task and "Prometheus" in task["name"])["block"]
    task = next(t for t in block if t.get("ansible.builtin.template", {}).get("src") == "prometheus.yml.j2")
    return str(task["ansible.builtin.template"]["validate"]).split()


# Prometheus 2.31.2's promtool, as far as `check config` goes: one command with file arguments and no flag of
# its own (prometheus/prometheus v2.31.2, bd21aafb66d6, cmd/promtool/main.go:63-66; --syntax-only arrived in
# v2.33.0, 344a13d96087, main.go:88). Kingpin refuses an unknown flag with this message. Ubuntu 22.04 ships
# 2.31.2+ds1-1ubuntu1.22.04.x (public captures of `apt list prometheus` on jammy).
OLD_PROMTOOL = """#!/bin/sh
[ "$1 $2" = "check config" ] || { echo "promtool 2.31 stand-in: $* not modelled" >&2; exit 2; }
shift 2
for arg in "$@"; do
  case "$arg" in
    --help|--version) ;;
    --*) echo "promtool: error: unknown long flag '$arg'" >&2; exit 1 ;;
  esac
done
exit 0
"""


def test_rendered_config_passes_promtool(tmp_path: Path) -> None:
    if shutil.which("promtool") is None:  # a missing tool fails: a skip would hide the test in CI
        pytest.fail("promtool missing: apt-get install prometheus (scripts/bootstrap.sh test installs it)")
    code, _results = run_playbook(tmp_path, inventory("aws", "p5.48xlarge", 8), render_play(tmp_path))
    assert code == 0
    argv = [arg.replace("%s", str(tmp_path / "prometheus.yml")) for arg in _config_validate()]
    rules = tmp_path / "rules.yml"  # the role writes its rules before prometheus.yml; this one is empty
    rules.write_text("groups: []\n")
    config = (tmp_path / "prometheus.yml").read_text()
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump({**yaml.safe_load(config), "rule_files": [str(rules)]})
    )
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_config_check_runs_on_the_oldest_shipped_promtool(tmp_path: Path) -> None:
    """Ubuntu 22.04's Prometheus 2.31 has no --syntax-only (issue 31, N5): the role's validate must be one
    every shipped promtool takes."""
    stand_in = tmp_path / "bin" / "promtool"
    stand_in.parent.mkdir()
    stand_in.write_text(OLD_PROMTOOL)
    stand_in.chmod(0o755)
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {}\n")
    argv = [arg.replace("%s", str(config)) for arg in _config_validate()]
    assert argv[0] == "promtool", argv
    done = subprocess.run([str(stand_in), *argv[1:]], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("provider", "itype", "gpus", "extra", "refusal"),
    [
        (
            "aws",
            "p5.48xlarge",
            8,
            {"monitoring_gpu_exporter": "simulated"},
            "never on a cloud or bare-metal node",
        ),
        (
            "baremetal",
            "dgx-h100",
            8,
            {"monitoring_gpu_exporter": "simulated"},
            "never on a cloud or bare-metal node",
        ),
        ("local", "local", 0, {"monitoring_gpu_exporter": "dcgm"}, "dcgm needs GPUs"),
        ("local", "local", 0, {"monitoring_gpu_exporter": "prometheus"}, "want dcgm, simulated or none"),
    ],
)
def test_preflight_refuses(
    tmp_path: Path, provider: str, itype: str, gpus: int, extra: dict[str, str], refusal: str
) -> None:
    code, results = run_playbook(tmp_path, inventory(provider, itype, gpus, **extra), render_play(tmp_path))
    assert code != 0
    message = results["mon-c0"]["Assert that the GPU exporter fits the node"]["msg"]
    assert refusal in message, message


def _site_tasks(tmp_path: Path, phase: str) -> list[str]:
    """The monitoring role's tasks site.yml runs in one phase, as ``ansible-playbook --list-tasks`` says:
    the bake's ``--tags install`` or a baked node's configure ``--skip-tags install`` (gpufleet.pipeline)."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory("local", "local", 0)))
    listed = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv), "--list-tasks",
         f"--{phase}", "install", str(ROOT / "playbooks" / "site.yml")],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return [line.strip().split("\t")[0] for line in listed.stdout.splitlines() if "monitoring : " in line]


def test_site_runs_monitoring_in_both_phases(tmp_path: Path) -> None:
    """site.yml imports the monitoring play (on by default, issue 20); its packages go in with the install
    phase, so a baked image carries them, and a baked node's configure still loads the role's variables and
    checks the inventory, which run in both phases."""
    install = _site_tasks(tmp_path, "tags")
    configure = _site_tasks(tmp_path, "skip-tags")
    both = {
        "monitoring : Do nothing where monitoring is off (the spec's software.monitoring)",
        "monitoring : Load the OS's variables",
        "monitoring : Assert that the GPU exporter fits the node",
    }
    assert both <= set(install) and both <= set(configure), (install, configure)
    assert "monitoring : Install the monitoring packages" in install
    assert "monitoring : Install the monitoring packages" not in configure, configure
    assert "monitoring : Write Prometheus's configuration (scrape targets from the inventory)" in configure
    # The files every node has alike are baked (issue 34 item 1); what names the node or the cluster is not.
    assert "monitoring : Write node_exporter's arguments" in install
    assert "monitoring : Write node_exporter's arguments" not in configure, configure
    per_cluster = [t for t in install if "Write the" in t or "Write Prometheus" in t or "Start" in t]
    assert not per_cluster, install
