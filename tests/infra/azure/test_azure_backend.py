"""The Azure backend: credentials, the stack's provider config, the tools SSH needs, and the Bastion route
to each node's private IP (the ProxyCommand script run for real against stand-ins of az and nc)."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure_testlib import CREATED_AT, SUBSCRIPTION

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.backend import backend_for
from gpufleet.infra.program import plan_spec
from gpufleet.spec.load import load_spec
from gpufleet.state import ClusterState

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "azure-nd-h100.yaml"
VARIABLES = ("ARM_CLIENT_ID", "ARM_USE_OIDC", "ARM_USE_MSI", "AZURE_CLIENT_ID", "AZURE_FEDERATED_TOKEN_FILE")


def test_missing_azure_credentials_say_how_to_log_in(monkeypatch, tmp_path):
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure"))
    spec = load_spec(EXAMPLE)
    with pytest.raises(EnvironmentProblem, match="no Azure credentials") as failure:
        backend_for(spec).check_credentials(spec)
    assert "az login" in (failure.value.hint or "") and "OIDC" in (failure.value.hint or "")
    (tmp_path / "azure").mkdir()
    for name in ("azureProfile.json", "msal_token_cache.json"):  # what 'az login' leaves
        (tmp_path / "azure" / name).write_text("{}", encoding="utf-8")
    backend_for(spec).check_credentials(spec)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("ARM_USE_OIDC", "true")
    backend_for(spec).check_credentials(spec)


def test_the_stack_config_points_azure_native_at_the_subscription_and_location():
    spec = load_spec(EXAMPLE)
    assert backend_for(spec).stack_config(spec, datetime(2026, 11, 27, 9, 0, tzinfo=UTC)) == {
        "gpufleet:createdAt": "2026-11-27T09:00:00+00:00",
        "azure-native:subscriptionId": SUBSCRIPTION,
        "azure-native:location": "eastus",
    }


def test_up_refuses_without_the_azure_cli(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    spec = load_spec(EXAMPLE)
    with pytest.raises(EnvironmentProblem, match="az and nc not found") as failure:
        backend_for(spec).check_tools(spec)
    assert "az extension add --name bastion" in (failure.value.hint or "")


def _stand_in(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def test_nodes_are_reached_at_their_private_ip_through_a_bastion_tunnel(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(EXAMPLE)
    state = ClusterState.for_name(spec.name)
    outputs = plan_spec(spec, CREATED_AT).outputs
    inventory = backend_for(spec).inventory_from_outputs(spec, state, outputs)
    for host in inventory.hosts:
        assert host.address == host.private_ip and host.private_ip.startswith("10.40."), host
    args = inventory.connection.ssh_common_args or ""
    script = state.ssh_dir / "bastion-proxy.sh"
    assert f'ProxyCommand="{script} %h %p"' in args and "StrictHostKeyChecking=accept-new" in args
    assert inventory.connection.user == "ubuntu" and inventory.connection.become
    text = script.read_text(encoding="utf-8")
    assert (
        f"--subscription {SUBSCRIPTION} --resource-group gpufleet-{spec.name} --name {spec.name}-bastion"
        in text
    )

    # Run it: a stand-in 'az' records its arguments and listens on the port it was given (as the tunnel
    # does); a stand-in 'nc' says where it connected. The script waits for the port, relays, and stops
    # the tunnel when the relay ends.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "az.log"
    _stand_in(
        bin_dir,
        "az",
        f'echo "$@" > {log}\nfor a in "$@"; do [ "$prev" = --port ] && port=$a; prev=$a; done\n'
        'exec python3 -c "import socket,sys,time; s=socket.socket(); '
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', int(sys.argv[1]))); "
        's.listen(5); time.sleep(30)" "$port"\n',
    )
    _stand_in(bin_dir, "nc", 'echo "relayed to $1:$2"\n')
    done = subprocess.run(
        [str(script), "10.40.0.5", "22"],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("relayed to 127.0.0.1:"), done.stdout
    called = log.read_text().split()
    assert called[:3] == ["network", "bastion", "tunnel"], called
    assert called[called.index("--target-ip-address") + 1] == "10.40.0.5"
    assert called[called.index("--resource-port") + 1] == "22"
    assert called[called.index("--port") + 1] == done.stdout.strip().rsplit(":", 1)[1]


def test_a_tunnel_that_never_opens_fails_with_a_message(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = load_spec(EXAMPLE)
    state = ClusterState.for_name(spec.name)
    backend_for(spec).connection(spec, state)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stand_in(bin_dir, "az", 'echo "ERROR: (AuthorizationFailed)" >&2; exit 1\n')
    done = subprocess.run(
        [str(state.ssh_dir / "bastion-proxy.sh"), "10.40.0.5", "22"],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 255 and "Azure Bastion tunnel to 10.40.0.5 did not open" in done.stderr


def test_azure_bakes_no_image_yet_and_says_so():
    """The table keeps bakes away from Azure (no builder yet): no baker, ``image build`` refuses with the
    way forward, ``stacks/`` looks nothing up, and ``images`` explains itself if anything asks."""
    from typer.testing import CliRunner

    from gpufleet.bake.baker import baker_of
    from gpufleet.bake.cloud import find_baked_in_program
    from gpufleet.cli.app import app
    from gpufleet.errors import ExitCode, SpecError
    from gpufleet.infra.backend import pulumi_backend_of
    from gpufleet.providers import BACKENDS

    assert BACKENDS["azure"].pulumi and not BACKENDS["azure"].bakes_in_cloud
    assert baker_of("azure") is None
    result = CliRunner().invoke(app, ["image", "build", str(EXAMPLE)])
    assert result.exit_code == ExitCode.SPEC, result.output
    assert "provider 'azure' bakes no node image" in " ".join(result.output.split()), result.output
    assert find_baked_in_program(load_spec(EXAMPLE)) is None
    with pytest.raises(SpecError, match="bakes no Azure images yet") as refused:
        _ = pulumi_backend_of("azure").images
    assert "provider.image.id" in (refused.value.hint or "")
