"""Per fabric: the env file the fabric role writes, and what the collective runs' tasks then receive.

1. The role's nccl.env is rendered in Python with the node's inventory variables (``fabric_env.render``);
   the exact task script the validation sends through srun (``collective_command``) sources it, with
   ``env`` standing in for the benchmark binary: the task must see every setting of the file, unchanged,
   plus only gpufleet's NCCL_DEBUG lines, and report the fabric and transport the file configured.
2. The Fabric play of playbooks/site.yml converges in check mode on each platform's inventory
   (configure phase, this machine standing in for the node), and the file it would write is exactly the
   Python rendering.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fabric_env import NODE, ROOT, fabric_role, inventory, render

from gpufleet.catalog.images import component_modes, load_image_manifests
from gpufleet.spec.model import FabricKind
from gpufleet.validate.gate import FABRIC_TRANSPORTS
from gpufleet.validate.slurm import DEBUG_ENV, TaskEnvironment, collective_command, parse_env_reports

# What the node answers when the role asks it (a real ibstat-sized port list for the RDMA fabrics).
_IB_PORTS = [f"mlx5_{i} 1 InfiniBand ACTIVE 400 ibp{i}s0" for i in range(8)]
_ROCE_PORTS = ["mlx5_0 1 Ethernet ACTIVE 100 ens1f0np0", "mlx5_1 1 Ethernet ACTIVE 100 ens1f1np1"]
_ANSWERS = {
    "ansible_facts": {"default_ipv4": {"interface": "eth0"}},
    "__infiniband_port_list": {"stdout_lines": _IB_PORTS},
    "__infiniband_gids": {"stdout_lines": []},
}

AZURE_HPC = dict(component_modes(load_image_manifests().images["azure-ubuntu-hpc-2204"]))

CASES = {
    "efa-p5": (
        ("efa", "aws", "p5.48xlarge"),
        {},
        {"NCCL_NET_PLUGIN": "ofi", "LD_LIBRARY_PATH": "/opt/amazon/ofi-nccl/lib"},
    ),
    "efa-g5": (("efa", "aws", "g5.48xlarge"), {}, {"NCCL_NET_PLUGIN": "ofi"}),
    "tcpx-a3high": (
        ("tcpx", "gcp", "a3-highgpu-8g"),
        {},
        {
            "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "enp6s0,enp12s0,enp134s0,enp140s0",
            "NCCL_SOCKET_IFNAME": "enp0s12",
        },
    ),
    "tcpxo-a3mega": (
        ("tcpxo", "gcp", "a3-megagpu-8g"),
        {},
        {"NCCL_FASTRAK_CTRL_DEV": "enp0s12", "NCCL_SOCKET_IFNAME": "enp0s12"},
    ),
    "gib-a3ultra": (("roce", "gcp", "a3-ultragpu-8g"), {}, {"NCCL_NET": "gIB"}),
    "infiniband-dgx": (
        ("infiniband", "baremetal", "dgx-h100"),
        {},
        # "=": exact names (NCCL matches a plain list by prefix: mlx5_1 would take mlx5_10 and mlx5_11 too)
        {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))},
    ),
    # Microsoft's HPC image on ND H100 v5: its settings (hopper.conf, ndv5.sh) besides the role's HCA list
    "infiniband-azure-h100": (
        ("infiniband", "azure", "Standard_ND96isr_H100_v5"),
        {"gpus": 8, "gpu_stack": "verify", "gpu_components": AZURE_HPC},
        {
            "NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml",
            "NCCL_COLLNET_ENABLE": "1",
            "NCCL_MIN_NCHANNELS": "32",
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8)),
            "OMPI_MCA_coll_hcoll_enable": "0",
        },
    ),
    # ND GB200 v6 (an NVLink domain of 18 VMs): graceblackwell.conf, and its plugin folder on the library path
    "infiniband-azure-gb200": (
        ("infiniband", "azure", "Standard_ND128isr_NDR_GB200_v6"),
        {"gpus": 4},
        {
            "NCCL_MNNVL_ENABLE": "1",
            "NCCL_NVLS_ENABLE": "1",
            "NCCL_IB_SL": "1",
            "NCCL_NET_GDR_C2C": "1",
            "LD_LIBRARY_PATH": "/usr/local/nccl-rdma-sharp-plugins/lib",
        },
    ),
    "roce-baremetal": (
        ("roce", "baremetal", "baremetal"),
        {"fabric_interfaces": 2, "fabric_port_gbps": 100, "fabric_gpudirect_rdma": True},
        {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_IB_GID_INDEX": "3"},
    ),
    "ethernet-local": (
        ("ethernet", "local", "local"),
        {},
        {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "eth0"},
    ),
}


def _answers(case: str) -> dict:
    if case == "roce-baremetal":
        return {
            **_ANSWERS,
            "__infiniband_port_list": {"stdout_lines": _ROCE_PORTS},
            "__infiniband_gids": {"stdout_lines": ["mlx5_0 3", "mlx5_1 3"]},
        }
    return _ANSWERS


def _file_settings(env_file: Path) -> dict[str, str]:
    """The variables sourcing the file alone sets or changes (what a training job gets from it)."""
    base = {"PATH": os.environ["PATH"]}
    script = '. "$1" && env -0'
    done = subprocess.run(
        ["bash", "-c", script, "x", str(env_file)], env=base, capture_output=True, check=True
    )
    after = dict(item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    clean = subprocess.run(["bash", "-c", "env -0"], env=base, capture_output=True, check=True)
    before = dict(item.split("=", 1) for item in clean.stdout.decode().split("\0") if "=" in item)
    return {key: value for key, value in after.items() if before.get(key) != value}


def _stand_in_profiles(text: str, tmp_path: Path) -> str:
    """Vendor profiles (TCPXO's, gIB's) are not on this machine: each sourced path gets a stand-in that,
    like the real ones, sets NCCL variables, one of them a setting the role also writes."""
    for index, line in enumerate(text.splitlines()):
        if line.startswith(". "):
            path = shlex.split(line[2:])[0]
            stand_in = tmp_path / f"profile-{index}.sh"
            stand_in.write_text(
                "export NCCL_VENDOR_PROFILE_LOADED=1\nexport NCCL_SOCKET_IFNAME=from-profile\n"
            )
            text = text.replace(line, f". {shlex.quote(str(stand_in))}  # stands in for {path}")
    return text


@pytest.mark.parametrize("case", CASES)
def test_the_collective_tasks_get_exactly_what_the_role_wrote(case: str, tmp_path: Path):
    (fabric, provider, instance_type), facts, expected = CASES[case]
    inv = inventory(fabric, provider, instance_type, **facts)
    text = render(inv, _answers(case))
    env_file = tmp_path / "nccl.env"
    env_file.write_text(_stand_in_profiles(text, tmp_path))
    written = _file_settings(env_file)
    assert written["GPUFLEET_FABRIC"] == fabric and expected.items() <= written.items(), text
    transport = written["GPUFLEET_TRANSPORT"]
    assert transport in FABRIC_TRANSPORTS[FabricKind(fabric)], f"{case}: the gate would refuse {transport}"

    command = collective_command(
        "all_reduce", [NODE], gpus_per_node=8, environment=TaskEnvironment(env_file=str(env_file))
    )
    argv = shlex.split(command)
    script = argv[argv.index("bash") + 2]
    task = subprocess.run(
        ["bash", "-c", script, "env", "-0"],
        env={"PATH": os.environ["PATH"], "SLURMD_NODENAME": NODE, "SLURM_LOCALID": "0"},
        capture_output=True,
        check=False,
    )
    assert task.returncode == 0, task.stderr.decode()
    received = dict(item.split("=", 1) for item in task.stdout.decode().split("\0") if "=" in item)
    for key, value in written.items():
        assert received.get(key) == value, (
            f"{case}: {key} is {received.get(key)!r} in the task, {value!r} in the file"
        )
    added = {key: received[key] for key in received if key not in written and key in DEBUG_ENV}
    assert added == DEBUG_ENV
    report = parse_env_reports(task.stderr.decode())[NODE]
    assert (report.fabric, report.transport, report.file) == (fabric, transport, str(env_file))


# ---- check-mode converge of the Fabric play, per platform -----------------------------------------

CHECK_CASES = [
    "efa-p5",
    "tcpx-a3high",
    "tcpxo-a3mega",
    "gib-a3ultra",
    "infiniband-dgx",
    "infiniband-azure-h100",
    "infiniband-azure-gb200",
    "ethernet-local",
]


def _fabric_play() -> dict:
    plays = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    return next(play for play in plays if play["name"] == "Fabric")


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One check-mode run of site.yml's Fabric play over one host per platform (this machine stands in for
    each). Each host carries its own inventory's variables, cluster-wide ones included, as gpufleet
    writes them for that platform; its env file would go under the run's folder."""
    tmp_path = tmp_path_factory.mktemp("fabric-check")
    hosts = {}
    for case in CHECK_CASES:
        (fabric, provider, instance_type), facts, _expected = CASES[case]
        data = inventory(fabric, provider, instance_type, **facts).to_ansible()["all"]
        hosts[case] = {
            **data["vars"],
            **data["children"]["compute"]["hosts"][NODE],
            "ansible_connection": "local",
            "ansible_become": False,
            "ansible_python_interpreter": "/usr/bin/python3",
            "gpufleet_nccl_env_file": str(tmp_path / case / "nccl.env"),
        }
    inventory_file = tmp_path / "inventory.yml"
    inventory_file.write_text(yaml.safe_dump({"all": {"children": {"compute": {"hosts": hosts}}}}))
    facts_play = {"name": "Facts", "hosts": "compute", "gather_facts": True, "gather_subset": ["!all", "min"]}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([facts_play, _fabric_play()]))
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", str(inventory_file), str(playbook), "--check", "--diff", "--skip-tags", "install",
            "--forks", "6",
        ],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return {"result": json.loads(done.stdout), "hosts": hosts, "dir": tmp_path}


@pytest.mark.parametrize("case", CHECK_CASES)
def test_fabric_play_converges_in_check_mode(case: str, check_run: dict):
    (fabric, provider, instance_type), facts, _expected = CASES[case]
    result = check_run["result"]
    assert result["stats"][case]["failures"] == 0 and result["stats"][case]["unreachable"] == 0
    tasks = [task for play in result["plays"] for task in play["tasks"] if case in task["hosts"]]
    ran = [task for task in tasks if not task["hosts"][case].get("skipped")]
    ran_roles = {task["task"].get("path", "").rsplit("/roles/", 1)[-1].split("/")[0] for task in ran}
    role = fabric_role(fabric, provider)
    assert role in ran_roles and "nccl_env" in ran_roles, sorted(ran_roles)
    assert not (ran_roles & {"efa", "gcp_gpudirect", "infiniband", "ethernet"}) - {role}, sorted(ran_roles)
    written = [
        task["hosts"][case]
        for task in ran
        if task["task"]["name"].endswith("Write the NCCL environment file")
    ]
    assert len(written) == 1 and written[0]["changed"], [task["task"]["name"] for task in ran]
    diff = written[0]["diff"]
    after = (diff[0] if isinstance(diff, list) else diff)["after"]
    gathered = [
        task["hosts"][case]["ansible_facts"] for task in ran if "ansible_facts" in task["hosts"][case]
    ]
    interface = next(
        (
            (found.get("ansible_default_ipv4") or found.get("default_ipv4"))["interface"]
            for found in gathered
            if found.get("ansible_default_ipv4") or found.get("default_ipv4")
        ),
        None,
    )
    answers = {
        "ansible_facts": {"default_ipv4": {"interface": interface}} if interface else {},
        "__infiniband_port_list": {"stdout_lines": []},  # this machine has no RDMA port
        "__infiniband_gids": {"stdout_lines": []},
        "gpufleet_nccl_env_file": check_run["hosts"][case]["gpufleet_nccl_env_file"],
    }
    inv = inventory(fabric, provider, instance_type, **facts)
    rendered = render(inv, answers, hostname=case)
    assert after == rendered, (after, rendered)
    assert not (check_run["dir"] / case).exists()  # check mode wrote nothing
