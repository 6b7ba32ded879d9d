"""``gpufleet stack-pin``: a stack's creation time is set at its first ``pulumi up`` and kept (issue 18).

No shipped stack file pins ``gpufleet:createdAt`` (tests/infra/aws/test_aws_stacks.py checks the AWS
files, this one every file). Before each ``pulumi up`` stack-pin writes it into the stack's config: the
user's own pin, else the stack's ``created_at`` output (a later up), else now (the first). The Automation
API's ``create_or_select_stack`` is faked with a stack that holds config and outputs as
``pulumi.automation.Stack`` returns them (``ConfigValue``, ``OutputValue``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from pulumi import automation as auto
from stacks_run import STACKS, fake_pulumi_cli, run_stack
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode
from gpufleet.infra.adopted import pin_created_at
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.tags import expires_at_text
from gpufleet.spec.load import load_spec
from gpufleet.state import CLUSTER_ID_LENGTH

runner = CliRunner()


@dataclass
class FakeStack:
    config: dict[str, auto.ConfigValue] = field(default_factory=dict)
    exported: dict[str, Any] = field(default_factory=dict)
    written: list[tuple[str, str]] = field(default_factory=list)

    def get_all_config(self) -> dict[str, auto.ConfigValue]:
        return dict(self.config)

    def outputs(self) -> dict[str, auto.OutputValue]:
        return {key: auto.OutputValue(value, False) for key, value in self.exported.items()}

    def set_config(self, key: str, value: auto.ConfigValue, *, path: bool = False) -> None:
        self.written.append((key, value.value))
        self.config[key] = value


@pytest.fixture
def fake(monkeypatch, tmp_path) -> dict[str, Any]:
    fake_pulumi_cli(tmp_path / "pulumi-home", monkeypatch)
    found: dict[str, Any] = {"stack": FakeStack(), "calls": []}

    def create_or_select_stack(stack_name, project_name=None, program=None, work_dir=None, opts=None):
        found["calls"].append((stack_name, work_dir))
        return found["stack"]

    monkeypatch.setattr(auto, "create_or_select_stack", create_or_select_stack)
    return found


def pin(*extra: str) -> dict[str, Any]:
    result = runner.invoke(
        app, ["stack-pin", "--stack", "p5-fsx", "--project-dir", str(STACKS), "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_no_shipped_stack_pins_its_creation_time():
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config") or {}
        assert "gpufleet:createdAt" not in config, f"{path.name} pins gpufleet:createdAt"


def test_first_up_pins_now(fake):
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    said = pin()
    value = datetime.fromisoformat(said["created_at"].replace("Z", "+00:00"))
    assert before <= value <= datetime.now(UTC), said
    assert said["from"] == "first up" and fake["stack"].written[0] == (
        "gpufleet:createdAt",
        said["created_at"],
    )
    assert fake["calls"] == [("p5-fsx", str(STACKS))], fake["calls"]


def test_a_later_up_keeps_the_stacks_creation_time(fake):
    fake["stack"].exported = {"created_at": "2026-11-20T08:00:00Z", "cluster": "llm-p5"}
    said = pin()
    assert said == {"stack": "p5-fsx", "created_at": "2026-11-20T08:00:00Z", "from": "stack output"}, said
    assert fake["stack"].written[0] == ("gpufleet:createdAt", "2026-11-20T08:00:00Z")


def test_the_cluster_id_is_made_at_the_first_up_kept_after_and_new_after_a_destroy(fake):
    """The per-cluster id (gpufleet.state) travels like createdAt: a new one at a stack's first up, the
    stack's ``cluster_id`` output on a later up, and a new one after a destroy (the stack has no outputs:
    a cluster made again under the same name is another cluster)."""
    pin()
    (_key, first), *_ = [w for w in fake["stack"].written if w[0] == "gpufleet:clusterId"]
    assert len(first) == CLUSTER_ID_LENGTH and int(first, 16) >= 0, first
    fake["stack"] = FakeStack(exported={"created_at": "2026-11-20T08:00:00Z", "cluster_id": first})
    pin()
    assert ("gpufleet:clusterId", first) in fake["stack"].written
    fake["stack"] = FakeStack()  # destroyed: no outputs
    pin()
    (_, again), *_ = [w for w in fake["stack"].written if w[0] == "gpufleet:clusterId"]
    assert again != first, again


def test_a_users_own_pin_wins(fake):
    fake["stack"].config = {"gpufleet:createdAt": auto.ConfigValue("2026-11-19T07:00:00Z")}
    fake["stack"].exported = {"created_at": "2026-11-20T08:00:00Z"}
    assert pin()["created_at"] == "2026-11-19T07:00:00Z"


def test_a_folder_without_a_project_is_refused(fake, tmp_path):
    result = runner.invoke(app, ["stack-pin", "--stack", "p5-fsx", "--project-dir", str(tmp_path)])
    assert result.exit_code == ExitCode.STATE, result.output
    assert "no Pulumi.yaml" in result.output and not fake["calls"]


def run_up(config: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """stacks/__main__.py under mocks: the expiry tag of the AWS provider, and the stack's outputs."""
    spec = load_spec(STACKS / config["gpufleet:spec"])
    plan = run_stack("p5-fsx", AwsMockCloud(spec), config, monkeypatch)
    (provider,) = plan.of_type("pulumi:providers:aws")
    tags = provider.inputs["defaultTags"]
    tags = (json.loads(tags) if isinstance(tags, str) else tags)["tags"]
    return tags["gpufleet:expires-at"], plan.outputs


def test_two_ups_a_day_apart_keep_the_first_ups_expiry(fake, monkeypatch):
    """pin -> pulumi up -> (a day later) pin -> pulumi up: the expiry tag does not move."""
    shipped = yaml.safe_load((STACKS / "Pulumi.p5-fsx.yaml").read_text(encoding="utf-8"))["config"]
    spec = load_spec(STACKS / shipped["gpufleet:spec"])
    first = datetime(2026, 11, 24, 9, 30, tzinfo=UTC)
    value, source = pin_created_at("p5-fsx", STACKS, first)
    assert source == "first up"
    tag, outputs = run_up({**shipped, "gpufleet:createdAt": value}, monkeypatch)
    assert tag == expires_at_text(spec, first), tag

    fake["stack"] = FakeStack(exported=outputs)  # the next CI job: a fresh checkout, the stack's outputs
    later, source = pin_created_at("p5-fsx", STACKS, first + timedelta(days=1))
    assert (later, source) == (value, "stack output")
    assert run_up({**shipped, "gpufleet:createdAt": later}, monkeypatch)[0] == tag


def test_without_pulumi_tls_the_program_says_how_to_get_a_key(monkeypatch):
    import sys

    from gpufleet.errors import EnvironmentProblem
    from gpufleet.infra.stack_access import stack_key

    monkeypatch.setitem(sys.modules, "pulumi_tls", None)
    with pytest.raises(EnvironmentProblem, match="pulumi-tls") as raised:
        stack_key("llm-p5", None)
    assert "gpufleet:sshPrivateKey" in (raised.value.hint or "")
