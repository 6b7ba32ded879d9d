"""A Kubernetes spec through check, validate, run and down, as a user runs them, against the fake API server
(fake_kube: the API's shapes, with the kubelet and the MPI Operator played): what gpufleet creates, reads,
gates, bisects, cordons and deletes, and each way a cluster can fall short of what validation needs, with
its message, its exit code and nothing left behind."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from fake_kube import FakeKube, make_node

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode

runner = CliRunner()
NODES = [f"ip-10-0-1-{index}.ec2.internal" for index in range(4)]


class Ran:
    """What one command printed: ``text`` is stdout and stderr, ``document`` the JSON a --json run printed."""

    def __init__(self, code: int, stdout: str, stderr: str) -> None:
        self.code, self.stdout, self.text = code, stdout, stdout + stderr

    @property
    def document(self) -> dict:
        return json.loads(self.stdout)


def invoke(*args: str) -> Ran:
    result = runner.invoke(app, list(args), env={"COLUMNS": "2000"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"gpufleet {' '.join(args)} crashed: {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output, result.output
    return Ran(result.exit_code, result.stdout, result.stderr)


def write_spec(tmp_path: Path, kubeconfig: Path, **changes) -> Path:
    spec = {
        "name": "eks-p5",
        "provider": {"kind": "kubernetes", "kubeconfig": str(kubeconfig), "context": "fake"},
        "scheduler": {
            "kind": "kubernetes",
            "kubernetes": {"image": "public.ecr.aws/hpc-cloud/nccl-tests:latest", "namespace": "default"},
        },
        "node_groups": [{"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 4}],
        "fabric": "efa",
        "validation": {
            "collectives": ["all_reduce"],
            "min_bytes": "1M",
            "max_bytes": "8G",
            "min_busbw": {"all_reduce": 20},
        },
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    path = tmp_path / "eks.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    """A state folder of the test's own, and consoles wide enough that no table folds a message (they take
    their width once, at import: tests/cli/conftest.py says why)."""
    from gpufleet.cli import common

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    for console in (common.console, common.err_console):
        monkeypatch.setattr(console, "_width", 2000)


def efa_nodes(count: int = 4, **overrides) -> list[dict]:
    return [make_node(name, efa=32, **overrides) for name in NODES[:count]]


def created(fake: FakeKube) -> list[str]:
    return [path for method, path in fake.requests if method in ("POST", "PATCH", "DELETE")]


def run_label_objects(fake: FakeKube) -> list[str]:
    return [
        f"{kind}/{name}"
        for kind, objects in fake.objects.items()
        for name, obj in objects.items()
        if "gpufleet.io/cluster" in (obj["metadata"].get("labels") or {})
        or (obj["metadata"].get("labels") or {}).get("app", "").startswith("eks-p5")
    ]


# ---- check: the preflight --------------------------------------------------------------------------------


def test_check_reads_the_cluster_and_says_what_each_worker_asks_for(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        ran = invoke("check", "--json", str(write_spec(tmp_path, kubeconfig)))
    assert ran.code == 0, ran.text
    findings = ran.document["findings"]
    ready = [f for f in findings if f["check"] == "kubernetes_ready"]
    assert ready and "4 node(s) with 32 GPU(s); GPU Operator ready" in ready[0]["message"], findings
    assert "vpc.amazonaws.com/efa: 32" in ready[0]["message"]
    assert not created(fake), "check must only read"
    # only reads of what the survey needs
    assert {path for _method, path in fake.requests} == {
        "/version",
        "/api/v1/namespaces/default",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org",
        "/api/v1/nodes",
        "/apis/nvidia.com/v1/clusterpolicies",
    }


BROKEN = [
    ("no MPI Operator", {"mpi_operator": None}, "install the MPI Operator: kubectl apply --server-side"),
    ("the Training Operator's v1 MPIJob", {"mpi_operator": "v1"}, "serves v1, not v2beta1"),
    (
        "no GPU Operator, no GPUs",
        {"gpu_operator": None, "gpus": 0},
        "install NVIDIA's GPU Operator: helm install",
    ),
    ("GPU Operator not ready", {"gpu_operator": "notReady"}, "ClusterPolicy cluster-policy is notReady"),
    ("no EFA device plugin", {"efa": 0}, "install the EFA device plugin"),
    ("fewer nodes than the spec asks", {"count": 3}, "the spec asks for 4 node(s) x 8 GPUs = 32 GPUs"),
    ("fewer GPUs per node", {"gpus": 4}, "advertise fewer than the 8 nvidia.com/gpu a p5.48xlarge has"),
    ("no namespace", {"namespace": "team-a"}, "namespace 'default' does not exist: kubectl create namespace"),
]


def broken_fake(change: dict) -> FakeKube:
    count = change.get("count", 4)
    node_args = {key: change[key] for key in ("gpus", "efa") if key in change}
    nodes = [make_node(name, **{"efa": 32, **node_args}) for name in NODES[:count]]
    options = {key: change[key] for key in ("mpi_operator", "gpu_operator") if key in change}
    return FakeKube(nodes, namespace=change.get("namespace", "default"), **options)


@pytest.mark.parametrize(("what", "change", "message"), BROKEN, ids=[case[0] for case in BROKEN])
def test_a_cluster_that_lacks_a_piece_is_refused_with_its_fix_and_nothing_made(
    tmp_path, what, change, message
):
    fake = broken_fake(change)
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(tmp_path, kubeconfig)
        ran = invoke("check", str(spec))
        assert ran.code == ExitCode.FAILED and message in ran.text, ran.text
        ran = invoke("validate", str(spec), "--out", str(tmp_path / "report"))
    assert ran.code == ExitCode.PROVISION, ran.text  # validate surveys first (its 'up'), and stops there
    assert message in ran.text and "nothing was created" in ran.text, ran.text
    assert not created(fake), created(fake)
    assert not (tmp_path / "report").exists()


def test_an_api_server_that_does_not_answer_is_named_with_how_to_reach_it(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        pass  # the server is gone; its kubeconfig stays
    spec = write_spec(tmp_path, kubeconfig)
    ran = invoke("check", str(spec))
    assert (
        ran.code == ExitCode.FAILED and "does not answer" in ran.text and "update-kubeconfig" in ran.text
    ), ran.text
    ran = invoke("validate", str(spec))
    assert ran.code == ExitCode.VALIDATE and "does not answer" in ran.text, ran.text


def test_a_kubeconfig_without_the_context_is_refused_offline(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path, context="other") as kubeconfig:
        ran = invoke("check", str(write_spec(tmp_path, kubeconfig)))
    assert ran.code == ExitCode.FAILED and "has no context 'fake'; its contexts: other" in ran.text, ran.text
    assert not fake.requests


# ---- validate: the suite through the seam ----------------------------------------------------------------


def test_validate_gates_the_mpijobs_output_and_leaves_nothing(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        ran = invoke(
            "validate", "--json", str(write_spec(tmp_path, kubeconfig)), "--out", str(tmp_path / "r")
        )
    assert ran.code == 0, ran.text
    document = ran.document
    assert document["passed"] is True and document["context"]["scheduler"] == "kubernetes"
    assert document["context"]["NCCL environment"] == "fabric efa, transport OFI (/gpufleet/nccl.env)"
    assert document["health"]["passed"] is True and len(document["health"]["nodes"]) == 4
    (test,) = document["tests"]
    assert test["verdict"]["passed"] and test["verdict"]["mode"] == "floor"
    assert any(c["name"] == "transport" and c["status"] == "pass" for c in test["verdict"]["checks"])
    (job,) = fake.mpijobs_made
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 4 and job["spec"]["slotsPerWorker"] == 8
    assert run_label_objects(fake) == [], "everything the run made is gone"
    # what the adapter wrote: the run's files, a health pod per node, the MPIJob; then each deleted
    writes = [
        (method, path.rsplit("/", 2)[-2] if method == "DELETE" else path.rsplit("/", 1)[-1])
        for method, path in fake.requests
        if method != "GET"
    ]
    assert sorted(writes) == sorted(
        [
            ("POST", "configmaps"),
            *[("POST", "pods")] * 4,
            ("POST", "mpijobs"),
            *[("DELETE", "pods")] * 4,
            ("DELETE", "mpijobs"),
            ("DELETE", "configmaps"),
        ]
    ), writes
    assert [obj["kind"] for obj in fake.created] == ["ConfigMap", "Pod", "Pod", "Pod", "Pod", "MPIJob"]
    assert all(obj["metadata"]["labels"]["gpufleet.io/cluster"] == "eks-p5" for obj in fake.created)
    assert (
        (tmp_path / "r" / "logs" / "all_reduce.log")
        .read_text()
        .startswith("# mpirun --allow-run-as-root -np 32")
    )


def test_a_slow_node_is_bisected_cordoned_tainted_and_annotated(tmp_path):
    slow = NODES[2]
    fake = FakeKube(efa_nodes(), bad={slow: "slow"})
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(
            tmp_path,
            kubeconfig,
            validation={
                "collectives": ["all_reduce"],
                "min_bytes": "1M",
                "max_bytes": "8G",
                "min_busbw": {"all_reduce": 20},
                "drain_bad_nodes": True,
            },
        )
        ran = invoke("validate", "--json", str(spec), "--out", str(tmp_path / "r"))
    assert ran.code == ExitCode.FAILED, ran.text
    bisection = ran.document["bisection"]
    assert list(bisection["bad_nodes"]) == [slow] and bisection["drained"] == [slow], bisection
    node = fake.nodes[slow]
    assert node["spec"]["unschedulable"] is True
    assert {"key": "gpufleet.io/drained", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["annotations"]["gpufleet.io/drain-reason"].startswith(
        "gpufleet all_reduce: failed together"
    )
    assert all(not fake.nodes[other]["spec"].get("unschedulable") for other in NODES if other != slow)
    assert run_label_objects(fake) == []
    assert len(fake.mpijobs_made) >= 3, "the bisection ran its rounds as MPIJobs on node subsets"
    subsets = [job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] for job in fake.mpijobs_made[1:]]
    assert set(subsets) <= {1, 2}, subsets


def test_nccl_falling_back_to_sockets_on_efa_fails_the_gate_by_name(tmp_path):
    fake = FakeKube(efa_nodes(), bad={NODES[1]: "socket"})
    with fake.serve(tmp_path) as kubeconfig:
        ran = invoke(
            "validate", "--json", str(write_spec(tmp_path, kubeconfig)), "--out", str(tmp_path / "r")
        )
    assert ran.code == ExitCode.FAILED
    (test,) = ran.document["tests"]
    transport = next(c for c in test["verdict"]["checks"] if c["name"] == "transport")
    assert transport["status"] == "fail" and "WRONG TRANSPORT: NCCL used Socket" in transport["message"]


def test_something_left_after_the_run_is_exit_9_after_the_report(tmp_path):
    fake = FakeKube(efa_nodes(), stuck={"eks-p5-"})  # pods whose deletion never finishes
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(tmp_path, kubeconfig)
        from gpufleet.validate.kubernetes import scheduler as module

        original = module.KubernetesScheduler.__init__

        def short_cleanup(self, *args, **kwargs):
            original(self, *args, **kwargs)
            self.cleanup_s = 0.5

        module.KubernetesScheduler.__init__ = short_cleanup  # type: ignore[method-assign]
        try:
            ran = invoke("validate", str(spec), "--out", str(tmp_path / "r"))
        finally:
            module.KubernetesScheduler.__init__ = original  # type: ignore[method-assign]
    assert ran.code == ExitCode.LEFTOVERS, ran.text
    assert (
        "left" in ran.text and "pods/eks-p5-" in ran.text and "gpufleet down SPEC deletes them" in ran.text
    ), ran.text
    assert (tmp_path / "r" / "validation-report.json").exists(), "the report is written before the exit"


def test_the_training_check_runs_train_ddp_as_an_mpijob_and_names_nodes(tmp_path):
    """On CPU nodes (the captured job is the local cluster's two-rank gloo run): one worker per node under
    torchrun, the checkpoint on the shared volume, and the judge names the nodes, not the worker pods."""
    fake = FakeKube([make_node(name, "c7i.4xlarge", gpus=0) for name in NODES[:2]], fabric="ethernet")
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(
            tmp_path,
            kubeconfig,
            fabric="ethernet",
            node_groups=[{"name": "cpu", "roles": ["compute"], "instance_type": "c7i.4xlarge", "count": 2}],
            scheduler={
                "kind": "kubernetes",
                "kubernetes": {
                    "image": "public.ecr.aws/hpc-cloud/nccl-tests:latest",
                    "shared_volume": "checkpoints",
                },
            },
            validation={
                "collectives": ["all_reduce"],
                "min_bytes": "1M",
                "max_bytes": "8G",
                "min_busbw": {"all_reduce": 20},
                "training": {"enabled": True},
            },
        )
        ran = invoke("validate", "--json", str(spec), "--out", str(tmp_path / "r"))
    training = ran.document["training"]
    assert training["command"].startswith("MPIJob eks-p5-") and "torchrun --nnodes=2" in training["command"]
    assert sorted({rank["host"] for rank in training["per_rank"]}) == NODES[:2], training["per_rank"]
    job = fake.mpijobs_made[-1]
    volumes = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"]
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "checkpoints"}} in volumes
    files = next(obj for obj in fake.created if obj["kind"] == "ConfigMap")["data"]
    assert (
        files["train_ddp.py"]
        == (Path(__file__).parents[2] / "examples" / "jobs" / "train_ddp.py").read_text()
    )
    assert run_label_objects(fake) == []
    assert training["passed"] is True, training["checks"]
    assert ran.code == 0, ran.text


def test_a_worker_that_cannot_be_scheduled_fails_its_run_with_the_schedulers_words(tmp_path):
    """A node that loses its EFA devices after the survey: the worker stays Pending; the run fails at the
    deadline with the scheduler's message, and the run's objects are deleted."""
    from gpufleet.infra.kubernetes.backend import backend
    from gpufleet.progress import SilentReporter
    from gpufleet.spec import load_spec
    from gpufleet.validate.kubernetes.scheduler import KubernetesScheduler

    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        spec = load_spec(write_spec(tmp_path, kubeconfig))
        inventory = backend.up(spec, None, SilentReporter(), None)  # type: ignore[arg-type]
        scheduler = KubernetesScheduler.for_spec(spec, inventory)
        scheduler.plan = replace(scheduler.plan, timeout_s=1)
        fake.nodes[NODES[3]]["status"]["allocatable"]["vpc.amazonaws.com/efa"] = "0"
        run = scheduler.run_collective(NODES, "all_reduce")
        left = scheduler.cleanup()
    assert run.rc == 124 and run.runner == "mpirun (MPIJob launcher)"
    assert "did not end within 1 s" in run.stderr and "Insufficient vpc.amazonaws.com/efa" in run.stderr, (
        run.stderr
    )
    assert left == [] and run_label_objects(fake) == []


# ---- run and down: the whole life of a handed-over cluster ----------------------------------------------


def test_run_surveys_validates_and_down_proves_nothing_is_left(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(tmp_path, kubeconfig)
        ran = invoke("run", str(spec), "--out", str(tmp_path / "r"))
    assert ran.code == 0, ran.text
    assert "nothing to do on Kubernetes" in ran.text or "0 task(s) changed" in ran.text, ran.text
    assert "validation passed" in ran.text
    assert not (tmp_path / "state" / "eks-p5").exists(), "down forgot the cluster"
    assert run_label_objects(fake) == []
    assert all(not node["spec"].get("unschedulable") for node in fake.nodes.values())


def test_down_deletes_what_an_interrupted_run_left_and_lists_again(tmp_path):
    fake = FakeKube(efa_nodes())
    with fake.serve(tmp_path) as kubeconfig:
        spec = write_spec(tmp_path, kubeconfig)
        assert invoke("up", str(spec)).code == 0
        fake._put(
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "eks-p5-x-files",
                    "labels": {"gpufleet.io/cluster": "eks-p5", "gpufleet.io/run": "eks-p5-x"},
                },
            },
        )
        ran = invoke("down", "--json", str(spec))
    assert ran.code == 0, ran.text
    assert "configmaps/eks-p5-x-files" in ran.document["removed"]
    assert run_label_objects(fake) == []


@pytest.mark.parametrize(("token", "code"), [("fake-token", 0), ("expired", ExitCode.FAILED)])
def test_an_exec_credential_plugin_gives_the_token_as_on_eks(tmp_path, token, code):
    """EKS, GKE and AKS kubeconfigs get their token from a command (`aws eks get-token`,
    `gke-gcloud-auth-plugin`, `kubelogin`) that prints an ExecCredential
    (client.authentication.k8s.io/v1beta1, kubernetes.io "Authenticating", client-go credential plugins): the
    client runs it, and the survey is made
    with its token."""
    fake = FakeKube(efa_nodes())
    plugin = tmp_path / "get-token"
    plugin.write_text(
        "#!/bin/sh\n"
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
        f'"status": {{"token": "{token}", "expirationTimestamp": "2099-01-01T00:00:00Z"}}}}\'\n'
    )
    plugin.chmod(0o755)
    with fake.serve(tmp_path) as kubeconfig:
        config = json.loads(kubeconfig.read_text())
        config["users"] = [
            {
                "name": "fake",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": str(plugin),
                        "args": ["eks", "get-token", "--cluster-name", "eks-p5"],
                        "interactiveMode": "Never",
                    }
                },
            }
        ]
        kubeconfig.write_text(json.dumps(config))
        ran = invoke("check", "--json", str(write_spec(tmp_path, kubeconfig)))
    assert ran.code == code, ran.text
    assert (("GET", "/api/v1/nodes") in fake.requests) == (code == 0)
    if code:
        assert "401 Unauthorized" in ran.text and "permissions gpufleet needs" in ran.text, ran.text
