"""``gpufleet adopt``: a cluster made by ``pulumi up`` in stacks/ becomes a gpufleet cluster (issue 18).

stacks/__main__.py runs under Pulumi's mocks for one AWS, one GCP and one Azure stack; its outputs, written as
``pulumi stack output --json --show-secrets`` prints them, are adopted, and the inventory is the one
``gpufleet up`` writes for the same spec (its engine replaced by the same program under the same mocks).
Then configure, validate, status and down run through the CLI on the adopted state, each faked at its
boundary: the Ansible runner, the validation suite, the Automation API's ``select_stack`` (a fake stack
that records what is called on it, as ``pulumi.automation.Stack`` exposes it) and the cloud's leftover
listing.
"""

from __future__ import annotations

import base64
import json
import runpy
import shutil
import stat
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi import automation as auto
from stacks_run import STACKS, fake_pulumi_cli, run_stack
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.configure.runner import PlayResult
from gpufleet.errors import ExitCode, LeftoversError
from gpufleet.infra import stack_access
from gpufleet.infra.aws.backend import AwsBackend
from gpufleet.infra.aws.images import AwsImages
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.azure.backend import AzureBackend
from gpufleet.infra.azure.mocks import AzureMockCloud
from gpufleet.infra.gcp.backend import GcpBackend
from gpufleet.infra.gcp.images import GcpImages
from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.infra.pulumi_stack import PulumiBackend, cluster_key
from gpufleet.inventory.model import Inventory
from gpufleet.spec.load import load_spec
from gpufleet.spec.model import ClusterSpec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
CREATED = "2026-11-24T09:00:00Z"
CLOUDS = [("p5-fsx", AwsMockCloud), ("a3-mega-lustre", GcpMockCloud), ("nd-h100-lustre", AzureMockCloud)]
runner = CliRunner()
PROJECT = ("--project-dir", str(STACKS))


def stack(name: str) -> tuple[dict[str, str], ClusterSpec, Path]:
    config = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text(encoding="utf-8"))["config"]
    spec_path = (STACKS / config["gpufleet:spec"]).resolve()
    return {**config, "gpufleet:createdAt": CREATED}, load_spec(spec_path), spec_path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A state folder, a ``pulumi`` CLI that answers ``pulumi version`` as the real one does, and
    credentials each cloud's check accepts (nothing reaches a cloud: every call is faked)."""
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    fake_pulumi_cli(tmp_path / "pulumi-home", monkeypatch)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    monkeypatch.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "example")
    monkeypatch.setenv("ARM_CLIENT_ID", "00000000-0000-0000-0000-000000000000")
    monkeypatch.setenv("GPUFLEET_PROMETHEUS_URL", "http://127.0.0.1:9")  # no Prometheus: said, not fatal
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fake_engine_up(monkeypatch: pytest.MonkeyPatch, cloud_type: Any) -> None:
    """``gpufleet up`` with the engine replaced by its own inline program under the same mocks."""
    created = datetime.fromisoformat(CREATED.replace("Z", "+00:00"))

    def deploy(self, spec, state, reporter, program=None, baked=None):
        keys = (cluster_key(state),)
        return run_offline(
            lambda: self.program(spec, created, keys, baked), cloud_type(spec), stack=spec.name
        ).outputs

    monkeypatch.setattr(PulumiBackend, "deploy", deploy)
    # The pipeline's image choice (CloudBaker.newest): the cloud lists no baked image, none is handed down.
    monkeypatch.setattr(AwsImages, "list_images", lambda self, scope: [])
    monkeypatch.setattr(GcpImages, "list_images", lambda self, scope: [])


def outputs_file(path: Path, exported: dict[str, Any]) -> Path:
    path.write_text(json.dumps(exported, indent=4) + "\n", encoding="utf-8")
    return path


def user_data_of(plan: Plan) -> list[str]:
    """Every node's cloud-config: AWS instances' and fleet templates' user data, GCP's metadata."""
    found = [
        r.inputs["userData"] for r in plan.of_type("aws:ec2/instance:Instance") if r.inputs.get("userData")
    ]
    found += [
        base64.b64decode(r.inputs["userData"]).decode()
        for r in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        if r.inputs.get("userData")
    ]
    found += [r.inputs["metadata"]["user-data"] for r in plan.of_type("gcp:compute/instance:Instance")]
    found += [
        base64.b64decode(r.inputs["osProfile"]["customData"]).decode()
        for r in plan.of_type("azure-native:compute:VirtualMachine")
    ]
    return found


@pytest.mark.parametrize(("name", "cloud_type"), CLOUDS)
def test_adopted_stack_gives_the_inventory_gpufleet_up_writes(env, monkeypatch, name, cloud_type):
    config, spec, spec_path = stack(name)
    plan = run_stack(name, cloud_type(spec), config, monkeypatch)
    exported = plan.outputs
    key = exported[stack_access.ACCESS_KEY_OUTPUT]
    assert key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"), "the stack exports its private key"
    assert exported[stack_access.CREATED_OUTPUT] == CREATED
    public = stack_access.public_of(key)
    data = user_data_of(plan)
    assert data and all(public in text for text in data), "every node authorizes the stack's key"
    assert len(plan.of_type(stack_access.TLS_PRIVATE_KEY)) == 1, [r.urn for r in plan.resources]

    fake_engine_up(monkeypatch, cloud_type)
    made = runner.invoke(app, ["up", str(spec_path), "--json"])
    assert made.exit_code == 0, made.output
    state = ClusterState.for_name(spec.name)
    by_up = Inventory.read(state.inventory_file)
    shutil.rmtree(state.root)

    file = outputs_file(env / "outputs.json", exported)
    adopted = runner.invoke(
        app, ["adopt", str(spec_path), "--stack", name, "--outputs", str(file), "--json", *PROJECT]
    )
    assert adopted.exit_code == 0, adopted.output
    assert key.splitlines()[1] not in adopted.output, "the private key is never printed"
    by_adopt = Inventory.read(state.inventory_file)
    assert by_adopt == by_up, (by_adopt.model_dump(), by_up.model_dump())

    assert state.private_key.read_text(encoding="utf-8") == key
    assert stat.S_IMODE(state.private_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.ssh_dir.stat().st_mode) == 0o700
    assert state.public_key.read_text(encoding="utf-8").strip() == public
    assert by_adopt.connection.private_key_file == str(state.private_key)
    record = state.load()
    assert record["adopted"] == {"stack": name, "project_dir": str(STACKS)}, record
    assert record["created_at"] == "2026-11-24T09:00:00+00:00" and record["phases"]["up"]["status"] == "done"
    # the stack's id (tagged on its resources) is the cluster's, never one made up here
    assert record["cluster_id"] == exported[stack_access.CLUSTER_ID_OUTPUT], record
    assert state.munge_key.exists()


@dataclass
class FakeStack:
    """What gpufleet calls on an ``auto.Stack`` of a project (local-program workspace)."""

    name: str
    exported: dict[str, Any]
    calls: list[str] = field(default_factory=list)

    def outputs(self) -> dict[str, auto.OutputValue]:
        self.calls.append("outputs")
        return {
            key: auto.OutputValue(value, key == stack_access.ACCESS_KEY_OUTPUT)
            for key, value in self.exported.items()
        }

    def info(self) -> None:
        return None

    def destroy(self, **_: Any) -> Any:
        self.calls.append("destroy")
        self.exported = {}
        summary = type("Summary", (), {"resource_changes": {"delete": 42}})()
        return type("DestroyResult", (), {"summary": summary, "stdout": "", "stderr": ""})()

    def __getattr__(self, name: str) -> Any:  # set_config, set_all_config, workspace, up, ...
        raise AssertionError(f"an adopted stack's {name} must not be touched")


@pytest.fixture
def selected(monkeypatch):
    """The Automation API's ``select_stack``, faked: records each selection."""
    stacks: dict[str, FakeStack] = {}
    selections: list[dict[str, Any]] = []

    def select_stack(stack_name, project_name=None, program=None, work_dir=None, opts=None):
        selections.append({"stack": stack_name, "work_dir": work_dir, "program": program})
        return stacks[stack_name]

    monkeypatch.setattr(auto, "select_stack", select_stack)
    return stacks, selections


@pytest.mark.parametrize(("name", "cloud_type"), CLOUDS)
def test_configure_validate_status_and_down_work_on_an_adopted_cluster(
    env, monkeypatch, selected, name, cloud_type
):
    config, spec, spec_path = stack(name)
    exported = run_stack(name, cloud_type(spec), config, monkeypatch).outputs
    stacks, selections = selected
    stacks[name] = FakeStack(name, dict(exported))

    adopted = runner.invoke(
        app, ["adopt", str(spec_path), "--stack", name, "--json", *PROJECT]
    )  # selects the stack
    assert adopted.exit_code == 0, adopted.output
    assert selections == [{"stack": name, "work_dir": str(STACKS), "program": None}], selections
    state = ClusterState.for_name(spec.name)

    plays: list[tuple[str, Path]] = []

    def run_playbook(playbook, inventory, artifacts, reporter, **_):
        plays.append((playbook, inventory))
        return PlayResult(ok=True, changed=3)

    monkeypatch.setattr("gpufleet.configure.runner.run_playbook", run_playbook)
    configured = runner.invoke(app, ["configure", str(spec_path), "--json"])
    assert configured.exit_code == 0, configured.output
    assert plays == [("site.yml", state.inventory_file)], plays

    suites: list[Inventory] = []

    def run_suite(spec_, inventory, executor, out_dir, **_):
        from gpufleet.validate.report import ReportFiles
        from gpufleet.validate.suite import SuiteResult

        suites.append(inventory)
        out_dir.mkdir(parents=True, exist_ok=True)
        files = ReportFiles(json=out_dir / "report.json", markdown=out_dir / "report.md", plot=None)
        files.json.write_text(json.dumps({"cluster": spec_.name, "passed": True}) + "\n", encoding="utf-8")
        files.markdown.write_text("# report\n", encoding="utf-8")
        return SuiteResult(True, [], [], [], None, None, [], files)

    monkeypatch.setattr("gpufleet.validate.suite.run_suite", run_suite)
    validated = runner.invoke(app, ["validate", str(spec_path), "--json", "--out", str(env / "report")])
    assert validated.exit_code == 0, validated.output
    assert suites == [Inventory.read(state.inventory_file)], "validate runs on the adopted inventory"

    shown = runner.invoke(app, ["status", str(spec_path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["hosts"] == len(exported["hosts"]), shown.stdout
    # The cluster's name and its project's stack name differ (llm-p5 / p5-fsx): both are shown (issue 18).
    assert json.loads(shown.stdout)["stack"] == name, shown.stdout
    told = runner.invoke(app, ["status", str(spec_path)])
    assert told.exit_code == 0, told.output
    assert f"cluster {spec.name}, stack {name} ({spec.provider.kind}); created" in told.stdout, told.stdout

    listed: list[str] = []

    def find_leftovers(self, spec_, cluster_id=None):
        listed.append(spec_.name)
        assert cluster_id == exported[stack_access.CLUSTER_ID_OUTPUT], "leftovers of the stack's own id"
        return []

    monkeypatch.setattr(AwsBackend, "find_leftovers", find_leftovers)  # the cloud's listing API
    monkeypatch.setattr(GcpBackend, "find_leftovers", find_leftovers)
    monkeypatch.setattr(AzureBackend, "find_leftovers", find_leftovers)
    archived: list[str] = []  # the Azure stack's Managed Lustre has a durable copy: archived before destroy

    def archive(cluster, fs, subscription, wait, reporter, **_):
        archived.append(cluster)
        assert stacks[name].calls.count("destroy") == 0, "the archive comes before the destroy"
        return [f"archived {cluster}"]

    monkeypatch.setattr("gpufleet.infra.azure.lustre_export.archive", archive)
    monkeypatch.setattr(
        "gpufleet.lifecycle.teardown.save_before_teardown", lambda state, reporter: {"available": False}
    )
    gone = runner.invoke(app, ["down", str(spec_path), "--json"])
    assert gone.exit_code == 0, gone.output
    assert stacks[name].calls.count("destroy") == 1, stacks[name].calls
    assert {s["stack"] for s in selections} == {name} and {s["work_dir"] for s in selections} == {str(STACKS)}
    assert listed == [spec.name], "the leftover check runs after the destroy"
    assert archived == ([spec.name] if spec.provider.kind == "azure" else []), archived
    document = json.loads(gone.stdout)
    assert document["cluster"] == spec.name and document["stack"] == name, document
    assert any(f"Pulumi stack '{name}'" in item and "kept" in item for item in document["removed"]), document
    assert not state.root.exists(), "the state folder goes last"
    (Path(str(STACKS)) / f"Pulumi.{name}.yaml").read_text(
        encoding="utf-8"
    )  # the project's file is still there


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"cluster": "someone-else"},
            "stack 'p5-fsx' holds cluster 'someone-else', but the spec names cluster 'llm-p5'",
        ),
        ({"provider": "gcp"}, "stack 'p5-fsx' holds a gcp cluster, but the spec's provider is aws"),
        ({stack_access.ACCESS_KEY_OUTPUT: "[secret]"}, "hides the secret output ssh_private_key"),
        ({"hosts": []}, "stack 'p5-fsx' was never brought up, or was destroyed"),
    ],
)
def test_outputs_of_another_cluster_or_without_the_key_are_refused(env, monkeypatch, change, message):
    config, spec, spec_path = stack("p5-fsx")
    exported = {**run_stack("p5-fsx", AwsMockCloud(spec), config, monkeypatch).outputs, **change}
    file = outputs_file(env / "outputs.json", exported)
    result = runner.invoke(app, ["adopt", str(spec_path), "--stack", "p5-fsx", "--outputs", str(file)])
    assert result.exit_code == ExitCode.STATE, result.output
    assert message in " ".join(result.output.split()), result.output
    assert "To fix:" in result.output, result.output
    assert not ClusterState.for_name(spec.name).root.exists(), "nothing is written for a refused stack"


def test_a_stack_with_a_lost_node_is_refused_with_the_command_that_replaces_it(env, monkeypatch):
    """AWS audit 2026-11-27 M7: a lost fleet node has an empty address in the outputs; adopt wrote it into
    the inventory and configure failed on a host with no address. Failed on main at bc3d77c."""
    config, spec, spec_path = stack("p5-fsx")
    exported = run_stack("p5-fsx", AwsMockCloud(spec), config, monkeypatch).outputs
    lost = exported["hosts"][-1]["name"]
    exported["hosts"][-1] = {**exported["hosts"][-1], "private_ip": ""}
    file = outputs_file(env / "outputs.json", exported)
    result = runner.invoke(app, ["adopt", str(spec_path), "--stack", "p5-fsx", "--outputs", str(file)])
    assert result.exit_code == ExitCode.STATE, result.output
    said = " ".join(result.output.split())
    assert f"host(s) without an address: {lost}" in said and "pulumi up --replace" in said, said
    assert not ClusterState.for_name(spec.name).root.exists(), "nothing is written for a refused stack"


def test_a_cluster_gpufleet_up_made_is_not_overwritten_by_an_adoption(env, monkeypatch):
    config, spec, spec_path = stack("p5-fsx")
    exported = run_stack("p5-fsx", AwsMockCloud(spec), config, monkeypatch).outputs
    fake_engine_up(monkeypatch, AwsMockCloud)
    assert runner.invoke(app, ["up", str(spec_path)]).exit_code == 0
    before = ClusterState.for_name(spec.name).inventory_file.read_text(encoding="utf-8")
    file = outputs_file(env / "outputs.json", exported)
    result = runner.invoke(app, ["adopt", str(spec_path), "--stack", "p5-fsx", "--outputs", str(file)])
    assert result.exit_code == ExitCode.STATE, result.output
    assert "was made here by 'gpufleet up'" in " ".join(result.output.split()), result.output
    assert ClusterState.for_name(spec.name).inventory_file.read_text(encoding="utf-8") == before


def test_a_missing_outputs_file_says_how_to_write_one(env):
    _, _, spec_path = stack("p5-fsx")
    result = runner.invoke(app, ["adopt", str(spec_path), "--stack", "p5-fsx", "--outputs", "nope.json"])
    assert result.exit_code == ExitCode.STATE, result.output
    assert "pulumi stack output --json --show-secrets" in " ".join(result.output.split()), result.output


def test_a_key_from_the_stack_config_is_authorized_and_exported(monkeypatch):
    """``gpufleet:sshPrivateKey`` (a Pulumi secret) instead of a generated key: no tls resource."""
    config, spec, _ = stack("a3-mega-lustre")
    given = stack_access.mock_private_key({"algorithm": "ED25519"})["privateKeyOpenssh"]
    plan = run_stack(
        "a3-mega-lustre", GcpMockCloud(spec), {**config, "gpufleet:sshPrivateKey": given}, monkeypatch
    )
    assert not plan.of_type(stack_access.TLS_PRIVATE_KEY)
    assert plan.outputs[stack_access.ACCESS_KEY_OUTPUT] == given
    public = stack_access.public_of(given)
    assert all(public in text for text in user_data_of(plan)), user_data_of(plan)


def test_the_private_key_output_is_a_secret(monkeypatch):
    config, spec, _ = stack("p5-fsx")
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", exported.__setitem__)
    secret: dict[str, bool] = {}

    def program() -> Any:
        pulumi.runtime.set_all_config({key: str(value) for key, value in config.items()})
        runpy.run_path(str(STACKS / "__main__.py"), run_name="__main__")
        key = exported[stack_access.ACCESS_KEY_OUTPUT]
        created = pulumi.Output.from_input(exported[stack_access.CREATED_OUTPUT])

        async def flags() -> dict[str, Any]:
            secret["key"] = await key.is_secret()
            secret["created"] = await created.is_secret()
            return {}

        return pulumi.Output.from_input(flags())

    run_offline(program, AwsMockCloud(spec), stack="p5-fsx")
    assert secret == {"key": True, "created": False}, secret


def test_down_names_the_adopted_clusters_stack_beside_the_cluster(capsys):
    """Text `down`: the project's stack name (the one `pulumi` and CI know) next to the cluster's."""
    from gpufleet.cli.cluster import render_down
    from gpufleet.lifecycle.teardown import Teardown

    spec = load_spec(ROOT / "examples" / "local.yaml")
    removed = Teardown(cluster=spec.name, stack="p5-fsx", removed=["Pulumi stack 'p5-fsx' ... kept, empty"])
    render_down(spec, removed, json_out=False)
    assert f"removed 1 item(s) of cluster {spec.name}, stack p5-fsx:" in capsys.readouterr().out
    with pytest.raises(LeftoversError, match=r"cluster 'x' \(Pulumi stack 'p5-fsx'\) finished but"):
        Teardown(cluster="x", stack="p5-fsx", leftovers=["i-1"]).raise_for_leftovers()
