"""``backend`` for ``provider: aws``: the AWS side of the Pulumi driver (``gpufleet.infra.automation``).

Its program is ``GpuClusterAws``; the stack's default provider gets the region; credentials are whatever
boto3 finds; nodes have no public IP, so with ``provider.ssm`` SSH goes through an SSM Session Manager
proxy script; the leftover finder is ``gpufleet.infra.aws.leftovers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpufleet.errors import EnvironmentProblem
from gpufleet.infra.automation import PulumiBackend, known_hosts_args
from gpufleet.infra.leftovers import ExpiredCluster, Leftover
from gpufleet.infra.plan import MockCloud
from gpufleet.infra.tags import AWS_CLUSTER_TAG
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection
from gpufleet.spec.model import AwsProvider, ClusterSpec
from gpufleet.state import ClusterState

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


def _provider(spec: ClusterSpec) -> AwsProvider:
    assert isinstance(spec.provider, AwsProvider)
    return spec.provider


class AwsBackend(PulumiBackend):
    kind = "aws"

    def program(self, spec: ClusterSpec, created_at: datetime, ssh_keys: Sequence[str]) -> dict[str, Any]:
        from gpufleet.infra.aws.component import GpuClusterAws, GpuClusterAwsArgs

        args = GpuClusterAwsArgs(spec=spec, created_at=created_at, ssh_keys=tuple(ssh_keys))
        return GpuClusterAws(spec.name, args).stack_outputs

    def mock_cloud(self, spec: ClusterSpec) -> MockCloud:
        from gpufleet.infra.aws.mocks import AwsMockCloud

        return AwsMockCloud(spec)

    def provider_config(self, spec: ClusterSpec) -> dict[str, str]:
        return {"aws:region": _provider(spec).region}

    def check_credentials(self, spec: ClusterSpec) -> None:
        import boto3

        if boto3.session.Session(region_name=_provider(spec).region).get_credentials() is None:
            raise EnvironmentProblem(
                "no AWS credentials found (environment, shared config, SSO, instance or web identity)",
                hint="run 'aws sso login' or 'aws configure' and set AWS_PROFILE, or export "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; in CI assume a role with OIDC (docs/aws.md)",
            )

    def connection(self, spec: ClusterSpec, state: ClusterState) -> Connection:
        """The cluster key, and with ``provider.ssm`` an SSM proxy (nodes have no public IP)."""
        provider = _provider(spec)
        key = str(state.private_key) if state.private_key.exists() else None
        known_hosts = known_hosts_args(state)
        if not provider.ssm:
            return Connection(user=IMAGE_USER, become=True, private_key_file=key, ssh_common_args=known_hosts)
        script = state.ssh_dir / "ssm-proxy.sh"
        state.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        script.write_text(
            SSM_PROXY.format(cluster=spec.name, region=provider.region, tag=AWS_CLUSTER_TAG, script=script),
            encoding="utf-8",
        )
        script.chmod(0o700)
        return Connection(
            user=IMAGE_USER,
            become=True,
            private_key_file=key,
            ssh_common_args=f'{known_hosts} -o ProxyCommand="{script} %h %p"',
        )

    expiry_scope = "region"

    def find_expired(self, scope: str) -> list[ExpiredCluster]:
        from gpufleet.infra.aws import leftovers

        return leftovers.find_expired(scope)

    def find_leftovers(self, spec: ClusterSpec) -> list[Leftover]:
        from gpufleet.infra.aws import leftovers

        return leftovers.find_leftovers(spec.name, _provider(spec).region)


backend = AwsBackend()
