"""``gpufleet up / status / down`` for clouds: the cluster's Pulumi program driven by the Automation API.

The program is ``gpufleet.infra.program.cluster_program`` run inline (the same one ``stacks/`` runs
under ``pulumi up`` in CI and ``gpufleet plan`` runs under mocks). The stack is named after the cluster;
its backend is ``$PULUMI_BACKEND_URL`` when set (an S3 bucket, Pulumi Cloud, ...), else a local file
backend in the cluster's state folder (``<state>/pulumi``). The stack's config records the region (and
the GCP project) and the cluster's creation time, so the expiry tag stays put across runs.

``up`` returns the inventory built from the stack outputs (``Inventory.from_stack_outputs``); ``down``
destroys the stack, then asks the cloud's leftover finder whether anything tagged for the cluster is
left. Missing prerequisites fail early with ``EnvironmentProblem``: the Pulumi CLI (the Automation API
runs it) and the cloud's credentials.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra import outputs as stack_outputs
from gpufleet.infra import program
from gpufleet.infra.tags import AWS_CLUSTER_TAG
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.lifecycle.state import ClusterState
from gpufleet.lifecycle.teardown import Teardown
from gpufleet.progress import Reporter
from gpufleet.spec.model import AwsProvider, ClusterSpec, GcpProvider

if TYPE_CHECKING:
    from pulumi import automation as auto

PROJECT = "gpufleet"
PULUMI_INSTALL = (
    "install the Pulumi CLI: 'curl -fsSL https://get.pulumi.com | sh' and add ~/.pulumi/bin to PATH "
    "(see https://www.pulumi.com/docs/install/)"
)


# ---- prerequisites --------------------------------------------------------------------------------


def pulumi_cli() -> Path:
    """The ``pulumi`` command the Automation API will run, or ``EnvironmentProblem`` saying how to get it."""
    found = shutil.which("pulumi")
    if found is None:
        home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
        candidate = home / "bin" / "pulumi"
        found = str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    if found is None:
        raise EnvironmentProblem(
            "the Pulumi CLI is missing: 'gpufleet up/status/down' on a cloud drive Pulumi's engine "
            "through the Automation API, which runs the 'pulumi' command ('gpufleet plan' needs none)",
            hint=PULUMI_INSTALL,
        )
    return Path(found)


def _gcp_credentials_present() -> bool:
    if any(
        os.environ.get(v)
        for v in (
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GOOGLE_CREDENTIALS",
            "GOOGLE_OAUTH_ACCESS_TOKEN",
            "CLOUDSDK_AUTH_ACCESS_TOKEN",
        )
    ):
        return True
    config = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
    return (config / "application_default_credentials.json").is_file()


def check_credentials(spec: ClusterSpec) -> None:
    """Fail with ``EnvironmentProblem`` when the cloud's SDK finds no credentials (nothing is called)."""
    provider = spec.provider
    if isinstance(provider, AwsProvider):
        import boto3

        if boto3.session.Session(region_name=provider.region).get_credentials() is None:
            raise EnvironmentProblem(
                "no AWS credentials found (environment, shared config, SSO, instance or web identity)",
                hint="run 'aws sso login' or 'aws configure' and set AWS_PROFILE, or export "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; in CI assume a role with OIDC (docs/aws.md)",
            )
    elif isinstance(provider, GcpProvider) and not _gcp_credentials_present():
        raise EnvironmentProblem(
            "no Google Cloud credentials found (GOOGLE_APPLICATION_CREDENTIALS, application default "
            "credentials)",
            hint="run 'gcloud auth application-default login', or set GOOGLE_APPLICATION_CREDENTIALS to a "
            "service account key; in CI use workload identity federation",
        )


# ---- the stack --------------------------------------------------------------------------------------


def backend_url(state: ClusterState) -> str:
    configured = os.environ.get("PULUMI_BACKEND_URL")
    if configured:
        return configured
    return state.backend_dir("pulumi").resolve().as_uri()


def stack_config(spec: ClusterSpec, created_at: datetime) -> dict[str, str]:
    """The stack's config: where the default provider points, and when the cluster was made."""
    config = {"gpufleet:createdAt": created_at.astimezone(UTC).isoformat()}
    provider = spec.provider
    if isinstance(provider, AwsProvider):
        config["aws:region"] = provider.region
    elif isinstance(provider, GcpProvider):
        config.update(
            {"gcp:project": provider.project, "gcp:region": provider.region, "gcp:zone": provider.zone}
        )
    return config


def cluster_key(state: ClusterState) -> str:
    """The cluster's own SSH public key (made once in the state folder): gpufleet configures with it.

    It is authorized on every node besides ``access.ssh_public_key``, which stays the user's own way in.
    """
    state.ensure_ssh_key()
    return state.public_key.read_text(encoding="utf-8").strip()


def _created_at(state: ClusterState) -> datetime:
    return state.created_at if state.exists() else datetime.now(UTC).replace(microsecond=0)


def select_stack(spec: ClusterSpec, state: ClusterState) -> auto.Stack:
    """Create or select the cluster's stack with its inline program, backend and config."""
    from pulumi import automation as auto

    cli = pulumi_cli()
    created_at = _created_at(state)
    url = backend_url(state)
    work_dir = state.backend_dir("pulumi")
    work_dir.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {}
    if url.startswith("file:") and not os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        # The stack holds no secret; the file backend still wants a passphrase for its secrets manager.
        env["PULUMI_CONFIG_PASSPHRASE"] = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
    keys = (cluster_key(state),)

    def run() -> None:
        stack_outputs.export_outputs(program.cluster_program(spec, created_at, ssh_keys=keys))

    try:
        stack = auto.create_or_select_stack(
            stack_name=spec.name,
            project_name=PROJECT,
            program=run,
            opts=auto.LocalWorkspaceOptions(
                work_dir=str(work_dir),
                env_vars=env,
                project_settings=auto.ProjectSettings(
                    name=PROJECT, runtime="python", backend=auto.ProjectBackend(url)
                ),
                pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent)),
            ),
        )
        stack.set_all_config(
            {key: auto.ConfigValue(value) for key, value in stack_config(spec, created_at).items()}
        )
    except auto.CommandError as exc:
        raise ProvisionError(f"cannot open Pulumi stack '{spec.name}' at {url}: {_tail(exc)}") from None
    return stack


def _tail(exc: BaseException, lines: int = 12) -> str:
    text = str(getattr(exc, "stderr", "") or exc).strip().splitlines()
    return "\n".join(text[-lines:])


def _plain(result_outputs: dict[str, Any]) -> dict[str, Any]:
    return {key: value.value for key, value in result_outputs.items()}


# ---- verbs ------------------------------------------------------------------------------------------


def deploy(spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> dict[str, Any]:
    """``pulumi up`` the cluster's stack; return its outputs (``gpufleet.infra.outputs``' shape)."""
    from pulumi import automation as auto

    pulumi_cli()
    check_credentials(spec)
    stack = select_stack(spec, state)
    with reporter.step(f"pulumi up: stack {spec.name}"):
        try:
            result = stack.up(color="never", on_output=lambda line: reporter.info(line.rstrip()))
        except auto.CommandError as exc:
            raise ProvisionError(
                f"pulumi up of cluster '{spec.name}' failed:\n{_tail(exc)}",
                hint="fix the cause above and run 'gpufleet up' again (it picks up where it stopped), or "
                "'gpufleet down' to remove what was made",
            ) from None
    return _plain(result.outputs)


def up(spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> Inventory:
    return inventory_from_outputs(spec, state, deploy(spec, state, reporter))


def status(spec: ClusterSpec, state: ClusterState) -> dict[str, Any]:
    from pulumi import automation as auto

    stack = select_stack(spec, state)
    try:
        outputs = _plain(stack.outputs())
        info = stack.info()
    except auto.CommandError as exc:
        raise ProvisionError(f"cannot read Pulumi stack '{spec.name}': {_tail(exc)}") from None
    last = None
    if info is not None:
        last = {
            "kind": info.kind,
            "result": info.result,
            "ended": info.end_time,
            "changes": info.resource_changes,
        }
    hosts = outputs.get("hosts") or []
    return {
        "backend": backend_url(state),
        "stack": spec.name,
        "last_update": last,
        "hosts": len(hosts),
        "outputs": outputs,
    }


def down(spec: ClusterSpec, state: ClusterState, reporter: Reporter) -> Teardown:
    """Destroy the stack, then look for anything tagged for the cluster that is still there."""
    from pulumi import automation as auto

    pulumi_cli()
    check_credentials(spec)
    stack = select_stack(spec, state)
    report = Teardown()
    with reporter.step(f"pulumi destroy: stack {spec.name}"):
        try:
            result = stack.destroy(color="never", on_output=lambda line: reporter.info(line.rstrip()))
        except auto.CommandError as exc:
            raise ProvisionError(
                f"pulumi destroy of cluster '{spec.name}' failed:\n{_tail(exc)}",
                hint="run 'gpufleet down' again; resources still tagged gpufleet:cluster="
                f"{spec.name} are listed by the leftover check",
            ) from None
    deleted = (result.summary.resource_changes or {}).get("delete", 0)
    report.removed.append(f"Pulumi stack {spec.name}: {deleted} resource(s) destroyed")
    with reporter.step("looking for leftovers"):
        report.leftovers = find_leftovers(spec, reporter)
    if not report.leftovers:
        stack.workspace.remove_stack(spec.name)
        report.removed.append(f"Pulumi stack {spec.name} removed from {backend_url(state)}")
    return report


def find_leftovers(spec: ClusterSpec, reporter: Reporter) -> list[str]:
    """What the cloud's leftover finder still sees tagged (labelled) for the cluster."""
    provider = spec.provider
    if isinstance(provider, AwsProvider):
        from gpufleet.lifecycle import leftovers_aws

        return [str(item) for item in leftovers_aws.find_leftovers(spec.name, provider.region)]
    if isinstance(provider, GcpProvider):
        from gpufleet.lifecycle import leftovers_gcp

        return [str(item) for item in leftovers_gcp.find_leftovers(spec.name, provider.project)]
    reporter.info(f"no leftover finder for {provider.kind}: trusting pulumi destroy")
    return []


# ---- outputs -> inventory -----------------------------------------------------------------------------

SSM_PROXY = """#!/bin/sh
# gpufleet: SSH to a node of cluster {cluster} through AWS SSM Session Manager (no public IP, no open port).
# Usage (as an SSH ProxyCommand): {script} <private-ip> <port>
set -eu
id=$(aws ec2 describe-instances --region {region} \\
  --filters "Name=private-ip-address,Values=$1" "Name=tag:{tag},Values={cluster}" \\
  "Name=instance-state-name,Values=running" \\
  --query 'Reservations[0].Instances[0].InstanceId' --output text)
exec aws ssm start-session --region {region} --target "$id" \\
  --document-name AWS-StartSSHSession --parameters "portNumber=$2"
"""


def connection_for(spec: ClusterSpec, state: ClusterState) -> Connection:
    """How Ansible reaches the nodes: the cluster key, and on AWS an SSM proxy (nodes have no public IP)."""
    key = str(state.private_key) if state.private_key.exists() else None
    known_hosts = f"-o UserKnownHostsFile={state.known_hosts} -o StrictHostKeyChecking=accept-new"
    provider = spec.provider
    if isinstance(provider, AwsProvider) and provider.ssm:
        script = state.ssh_dir / "ssm-proxy.sh"
        state.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        script.write_text(
            SSM_PROXY.format(cluster=spec.name, region=provider.region, tag=AWS_CLUSTER_TAG, script=script),
            encoding="utf-8",
        )
        script.chmod(0o700)
        return Connection(
            user="root",
            private_key_file=key,
            ssh_common_args=f'{known_hosts} -o ProxyCommand="{script} %h %p"',
        )
    if isinstance(provider, GcpProvider):
        # Nodes have no external IP: SSH goes through an IAP TCP tunnel to the instance, which
        # 'gcloud compute start-iap-tunnel' names by instance name (= the inventory host name, the
        # address Ansible connects to on GCP; see inventory_from_outputs).
        tunnel = (
            f"gcloud compute start-iap-tunnel %h %p --listen-on-stdin --project={provider.project} "
            f"--zone={provider.zone} --verbosity=warning"
        )
        return Connection(
            user="root", private_key_file=key, ssh_common_args=f'{known_hosts} -o ProxyCommand="{tunnel}"'
        )
    return Connection(user="root", private_key_file=key, ssh_common_args=known_hosts)


def inventory_from_outputs(spec: ClusterSpec, state: ClusterState, outputs: dict[str, Any]) -> Inventory:
    if isinstance(spec.provider, GcpProvider):
        outputs = {**outputs, "hosts": [{**host, "address": host["name"]} for host in outputs["hosts"]]}
    return Inventory.from_stack_outputs(outputs, connection=connection_for(spec, state))
