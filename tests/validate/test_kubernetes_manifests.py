"""Every object a Kubernetes validation run creates, against the schemas the API server and the MPI Operator
apply (kube_schemas: kubernetes-validate for core kinds, the operator's v2beta1 constraints for MPIJobs), and
the NCCL environment the pods source, rendered from the same role source as /etc/gpufleet/nccl.env."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import kube_schemas

from gpufleet.configure import nccl_env
from gpufleet.validate.kubernetes import manifests as m
from gpufleet.validate.slurm import Sweep, TaskEnvironment

ROOT = Path(__file__).resolve().parents[2]
PLAN = m.RunPlan(
    cluster="eks-p5",
    run_id="eks-p5-20261127t090112",
    namespace="gpufleet",
    image="public.ecr.aws/hpc-cloud/nccl-tests:latest",
    gpus_per_node=8,
    devices={"vpc.amazonaws.com/efa": 32},
    shared_volume="checkpoints",
    timeout_s=1800,
)
NODES = [f"ip-10-0-1-{index}.ec2.internal" for index in range(4)]


def _collective_job(nodes: list[str] = NODES) -> dict:
    environment = TaskEnvironment(
        env_file=m.NCCL_ENV, host=m.NODE_NAME_EXPR, local_rank="OMPI_COMM_WORLD_LOCAL_RANK"
    )
    task = ["bash", "-c", environment.script(), "/opt/nccl-tests/build/all_reduce_perf", *Sweep().args()]
    return m.mpijob(PLAN, f"{PLAN.run_id}-coll1", "collective", nodes, m.mpirun(32, 8, task), slots=8)


def _training_job() -> dict:
    name = f"{PLAN.run_id}-trai2"
    task = m.training_task(
        nodes=4,
        gpus_per_node=8,
        rendezvous=f"{m.worker_dns(name, 0, PLAN.namespace)}:{m.RDZV_PORT}",
        run_id=PLAN.run_id,
        settings={"TRAIN_STEPS": "60", "TRAIN_CHECKPOINT_DIR": f"{m.SHARED_DIR}/ck"},
    )
    return m.mpijob(PLAN, name, "training", NODES, m.mpirun(4, 1, task), slots=1)


def every_manifest() -> list[dict]:
    files = m.files_config_map(
        PLAN, {"nccl.env": "export NCCL_NET_PLUGIN=ofi\n", "node_health.py": "print()\n"}
    )
    health = m.health_pod(PLAN, 0, NODES[0], ["--fabric", "efa", "--skip", "services"], dcgm_host=True)
    return [files, health, _collective_job(), _training_job()]


@pytest.mark.parametrize(
    "manifest", every_manifest(), ids=lambda obj: f"{obj['kind']}-{obj['metadata']['name']}"
)
def test_every_rendered_object_passes_the_api_schemas(manifest):
    assert kube_schemas.problems(manifest) == []


def _broken(change) -> dict:
    job = copy.deepcopy(_collective_job())
    change(job)
    return job


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda j: j["spec"].pop("slotsPerWorker"), "slotsPerWorker"),
        (lambda j: j["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "1 was expected"),
        (lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always"), "Always"),
        (lambda j: j["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes"), "Sometimes"),
        (lambda j: j["spec"].update(mpiImplementation="OpenMPI5"), "OpenMPI5"),
        (lambda j: j.update(apiVersion="kubeflow.org/v1"), "kubeflow.org/v2beta1"),
        (lambda j: j["metadata"].update(name="A" * 60), "DNS-1035"),
        (
            lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
                gpus=8
            ),
            "gpus",
        ),
        (
            lambda j: j["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[]),
            "containers",
        ),
    ],
)
def test_the_checks_refuse_what_the_operator_would(change, expected):
    """The schemas can fail: each change the operator (or the API server) refuses is found, by name."""
    found = kube_schemas.problems(_broken(change))
    assert found and any(expected in problem for problem in found), found


def test_a_pod_with_an_unknown_field_is_refused():
    pod = m.health_pod(PLAN, 0, NODES[0], ["--fabric", "efa"], dcgm_host=False)
    pod["spec"]["containers"][0]["gpu"] = 8
    assert any("'gpu' was unexpected" in problem for problem in kube_schemas.problems(pod))


def test_workers_are_pinned_to_the_nodes_one_each_and_ask_for_the_catalogs_devices():
    job = _collective_job()
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]
    spec = worker["template"]["spec"]
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": NODES}
    ]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname" and worker["replicas"] == len(NODES)
    container = spec["containers"][0]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}}
    assert container["command"][-1].endswith("exec /usr/sbin/sshd -De")  # the operator's worker command
    assert {mount["mountPath"] for mount in container["volumeMounts"]} == {
        "/gpufleet",
        "/gpufleet-run",
        "/dev/shm",
        "/gpufleet-shared",
    }
    # every object the run makes carries the run's labels, the pods' templates included
    labels = worker["template"]["metadata"]["labels"]
    assert labels[m.LABEL_RUN] == PLAN.run_id and labels[m.LABEL_CLUSTER] == "eks-p5"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][:8] == [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        "32",
        "--map-by",
        "ppr:8:node",
        "--bind-to",
        "none",
    ]
    assert "resources" not in launcher or "nvidia.com/gpu" not in str(launcher["resources"])


# ---- the NCCL environment: one source, two renderings --------------------------------------------------


@pytest.mark.parametrize(
    ("fabric", "role", "transport", "settings"),
    [
        (
            "efa",
            "efa",
            "OFI",
            {"NCCL_NET_PLUGIN": "ofi", "NCCL_TUNER_PLUGIN": "ofi", "GPUFLEET_OFI_NCCL_EXPECTED": "1.20.0"},
        ),
        ("infiniband", "infiniband", "IB", {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0"}),
        ("roce", "infiniband", "IB", {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0"}),
        ("ethernet", "ethernet", "Socket", {"NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "eth1"}),
    ],
)
def test_the_pods_env_file_is_the_fabric_roles(fabric, role, transport, settings):
    host_vars = {"gpufleet_software": {"aws_ofi_nccl": "1.20.0"}, "gpufleet_fabric_host_nics": ["eth1"]}
    rendered = nccl_env.render(fabric, host_vars, hostname="eks-p5 pods", path=m.NCCL_ENV)
    assert (rendered.role, rendered.transport, rendered.settings) == (role, transport, settings)
    lines = rendered.text.splitlines()
    assert f"export GPUFLEET_FABRIC={fabric}" in lines and f"export GPUFLEET_TRANSPORT={transport}" in lines
    assert [
        line for line in lines if line.startswith("export NCCL_") or line.startswith("export GPUFLEET_OFI")
    ] == [f"export {name}={value}" for name, value in settings.items()]


def test_a_setting_changed_in_the_role_changes_the_pods_file_too(tmp_path):
    """The rendering reads the role: no second table of settings exists to forget."""
    roles = tmp_path / "roles"
    shutil.copytree(ROOT / "roles" / "nccl_env", roles / "nccl_env")
    shutil.copytree(ROOT / "roles" / "efa", roles / "efa")
    defaults = roles / "efa" / "defaults" / "main.yml"
    data = yaml.safe_load(defaults.read_text())
    data["efa_default_env"]["NCCL_PROTO"] = "Simple"
    defaults.write_text(yaml.safe_dump(data))
    rendered = nccl_env.render("efa", {}, hostname="x", path=m.NCCL_ENV, roles=roles)
    assert rendered.settings["NCCL_PROTO"] == "Simple" and "export NCCL_PROTO=Simple" in rendered.text


def test_the_inventorys_override_wins_and_an_empty_value_is_left_to_nccl():
    rendered = nccl_env.render(
        "ethernet",
        {"gpufleet_nccl_env": {"NCCL_SOCKET_IFNAME": "", "NCCL_DEBUG_FILE": "/tmp/x"}},
        hostname="x",
        path="/p",
    )
    assert "NCCL_SOCKET_IFNAME" not in rendered.settings and rendered.settings["NCCL_DEBUG_FILE"] == "/tmp/x"


def test_the_role_that_writes_each_fabrics_file_is_the_one_the_playbook_includes():
    """site.yml's Fabric play picks the role by fabric (off Google Cloud); the role's own __<role>_fabrics
    says the
    same, which is what the pods' rendering reads."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    plays = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    fabric_play = next(play for play in plays if play.get("name") == "Fabric")
    expression = fabric_play["vars"]["__site_fabric_role"]
    for fabric in ("efa", "infiniband", "roce", "ethernet"):
        templar = Templar(
            loader=DataLoader(), variables={"gpufleet_fabric": fabric, "gpufleet_provider": "kubernetes"}
        )
        assert templar.template(trust_as_template(expression)).strip() == nccl_env.fabric_role(fabric)


def test_a_fabric_no_role_renders_off_a_node_is_refused_by_name():
    from gpufleet.errors import ValidationRunError

    with pytest.raises(ValidationRunError, match="fabric 'tcpxo'"):
        nccl_env.fabric_role("tcpxo")
