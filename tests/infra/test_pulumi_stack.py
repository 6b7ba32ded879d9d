"""The Automation API driver, as far as it goes without the Pulumi CLI: prerequisites, config, inventory."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra import pulumi_stack
from gpufleet.infra.backend import backend_for
from gpufleet.infra.program import plan_spec
from gpufleet.progress import SilentReporter
from gpufleet.spec import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[2]
CREATED = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    return ClusterState.for_name("llm-p5")


@pytest.fixture
def spec():
    return load_spec(ROOT / "examples" / "aws-p5.yaml")


@pytest.fixture
def no_pulumi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "no-pulumi-home"))


def test_missing_pulumi_cli_says_how_to_install(no_pulumi):
    with pytest.raises(EnvironmentProblem) as failure:
        pulumi_stack.pulumi_cli()
    assert "the Pulumi CLI is missing" in failure.value.message
    assert "get.pulumi.com" in (failure.value.hint or "")
    assert failure.value.exit_code == 8


@pytest.mark.parametrize("verb", ["deploy", "destroy"])
def test_up_and_down_stop_before_anything_without_the_cli(no_pulumi, spec, state, verb):
    with pytest.raises(EnvironmentProblem, match="Pulumi CLI is missing"):
        getattr(backend_for(spec), verb)(spec, state, SilentReporter())
    assert not state.backend_dir("pulumi").exists(), "nothing may be written before the CLI is found"


def test_pulumi_cli_found_in_pulumi_home(monkeypatch, tmp_path):
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / "pulumi"
    binary.write_text("#!/bin/sh\n", encoding="utf-8")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("PULUMI_HOME", str(home))
    assert pulumi_stack.pulumi_cli() == binary


def test_missing_aws_credentials(monkeypatch, tmp_path, spec):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(EnvironmentProblem, match="no AWS credentials") as failure:
        backend_for(spec).check_credentials(spec)
    assert "OIDC" in (failure.value.hint or "")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    backend_for(spec).check_credentials(spec)


def test_missing_gcp_credentials(monkeypatch, tmp_path):
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN",
                "CLOUDSDK_AUTH_ACCESS_TOKEN"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    gcp = load_spec(ROOT / "examples" / "gcp-a3-mega.yaml")
    with pytest.raises(EnvironmentProblem, match="no Google Cloud credentials"):
        backend_for(gcp).check_credentials(gcp)
    (tmp_path / "gcloud").mkdir()
    (tmp_path / "gcloud" / "application_default_credentials.json").write_text("{}", encoding="utf-8")
    backend_for(gcp).check_credentials(gcp)


def test_stack_config(spec):
    assert backend_for(spec).stack_config(spec, CREATED) == {
        "gpufleet:createdAt": "2026-11-22T09:00:00+00:00",
        "aws:region": "us-east-1",
    }
    gcp = load_spec(ROOT / "examples" / "gcp-a3-mega.yaml")
    config = backend_for(gcp).stack_config(gcp, CREATED)
    assert (config["gcp:project"], config["gcp:region"], config["gcp:zone"]) == (
        gcp.provider.project,
        gcp.provider.region,
        gcp.provider.zone,
    )


def test_backend_is_the_env_url_or_a_file_backend_in_the_state_folder(monkeypatch, state):
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    url = pulumi_stack.backend_url(state)
    assert url.startswith("file:///") and url.endswith("/llm-p5/pulumi"), url
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://my-pulumi-state")
    assert pulumi_stack.backend_url(state) == "s3://my-pulumi-state"


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_nodes_authorize_the_cluster_key_and_the_users_key(spec, state):
    from gpufleet.infra.plan import run_offline
    from gpufleet.infra.program import cluster_program, mock_cloud

    cluster = pulumi_stack.cluster_key(state)
    assert cluster.startswith("ssh-ed25519 ") and cluster == pulumi_stack.cluster_key(state)
    user = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHVzZXJzLW93bi1rZXktZm9yLXRlc3RzLW9ubHktMDAwMDA user@laptop"
    with_user = spec.model_copy(update={"access": spec.access.model_copy(update={"ssh_public_key": user})})
    plan = run_offline(
        lambda: cluster_program(with_user, CREATED, ssh_keys=(cluster,)), mock_cloud(with_user)
    )
    user_data = [
        str(r.inputs.get("userData", "")) for r in plan.resources if r.type == "aws:ec2/instance:Instance"
    ]
    assert user_data and all(cluster in text and user in text for text in user_data), user_data[:1]


def test_outputs_to_inventory_through_ssm(spec, state):
    state.begin(spec, None)  # the cluster's id is made here
    outputs = plan_spec(spec, CREATED).outputs
    inventory = backend_for(spec).inventory_from_outputs(spec, state, outputs)
    assert [h.name for h in inventory.compute] == ["llm-p5-gpu-0", "llm-p5-gpu-1"]
    assert {h.fabric_interfaces for h in inventory.compute} == {32}
    assert inventory.filesystem["dns_name"].endswith(".fsx.us-east-1.amazonaws.com")
    assert inventory.controller.address == inventory.controller.private_ip
    script = state.ssh_dir / "ssm-proxy.sh"
    args = inventory.connection.ssh_common_args or ""
    assert f'ProxyCommand="{script} %h %p"' in args, args
    text = script.read_text(encoding="utf-8")
    assert "aws ssm start-session --region us-east-1" in text
    assert "Name=tag:gpufleet:cluster,Values=llm-p5" in text
    # another cluster of the name (the same subnet range) is never the target (AWS audit 2026-11-27 M5)
    assert f"Name=tag:gpufleet:cluster-id,Values={state.cluster_id}" in text, text
    assert script.stat().st_mode & 0o777 == 0o700


def test_gcp_nodes_are_reached_through_an_iap_tunnel_by_instance_name(tmp_path, monkeypatch):
    from gpufleet.spec import load_spec

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "gcp-a3-mega.yaml")
    gcp_state = ClusterState.for_name(spec.name)
    outputs = plan_spec(spec, CREATED).outputs
    inventory = backend_for(spec).inventory_from_outputs(spec, gcp_state, outputs)
    for host in inventory.hosts:
        assert host.address == host.name, "IAP tunnels name the instance"
        assert host.private_ip != host.name
    args = inventory.connection.ssh_common_args or ""
    assert "gcloud compute start-iap-tunnel %h %p --listen-on-stdin" in args
    assert f"--project={spec.provider.project}" in args and f"--zone={spec.provider.zone}" in args


def test_the_engine_finds_this_interpreter_for_the_dynamic_fleet_release(spec, state, monkeypatch, tmp_path):
    """The engine serves a Python dynamic resource (infra/aws/fleet_release.py) from `python3 -m
    pulumi.dynamic` on PATH when the project names no virtualenv (the inline stack of gpufleet up): this
    interpreter's folder comes first, so that process imports the gpufleet that runs the program."""
    import sys

    from pulumi import automation as auto
    from stacks_run import fake_pulumi_cli

    fake_pulumi_cli(tmp_path / "pulumi-home", monkeypatch)
    seen: dict[str, Any] = {}

    class Stack:
        def set_all_config(self, config: Any) -> None:
            seen["config"] = config

    def create_or_select_stack(**kwargs: Any) -> Stack:
        seen.update(kwargs)
        return Stack()

    monkeypatch.setattr(auto, "create_or_select_stack", create_or_select_stack)
    state.begin(spec, None)
    backend_for(spec).select_stack(spec, state)
    path = seen["opts"].env_vars["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent), path[:2]
    assert seen["config"]["gpufleet:clusterId"].value == state.cluster_id
