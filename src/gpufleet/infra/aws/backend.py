"""``backend`` for ``provider: aws``: the AWS side of the Pulumi driver (``gpufleet.infra.pulumi_stack``).

Its program is ``GpuClusterAws``; the stack's default provider gets the region; credentials are whatever
boto3 finds; nodes have no public IP, so with ``provider.ssm`` SSH goes through an SSM Session Manager
proxy script; the leftover finder is ``gpufleet.infra.aws.leftovers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import EnvironmentProblem, ProvisionError
from gpufleet.infra.aws.fleet import REPLACING_FIELDS
from gpufleet.infra.aws.images import AwsImages
from gpufleet.infra.images import BakedRecord, CloudImage
from gpufleet.infra.leftovers import ExpiredCluster, Leftover
from gpufleet.infra.plan import MockCloud
from gpufleet.infra.pulumi_stack import PulumiBackend, known_hosts_args
from gpufleet.infra.tags import AWS_CLUSTER_ID_TAG, AWS_CLUSTER_TAG, PLAN_CLUSTER_ID
from gpufleet.infra.userdata import IMAGE_USER
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.progress import Reporter
from gpufleet.spec.model import AwsProvider, ClusterSpec
from gpufleet.state import ClusterState

if TYPE_CHECKING:
    from gpufleet.infra.backend import Backend

SSM_PROXY = """#!/bin/sh
# gpufleet: SSH to a node of cluster {cluster} through AWS SSM Session Manager (no public IP, no open port).
# Usage (as an SSH ProxyCommand): {script} <private-ip> <port>
set -eu
id=$(aws ec2 describe-instances --region {region} \\
  --filters "Name=private-ip-address,Values=$1" "Name=tag:{tag},Values={cluster}"{same_id} \\
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
    replacing_fields = REPLACING_FIELDS

    def program(
        self,
        spec: ClusterSpec,
        created_at: datetime,
        ssh_keys: Sequence[str],
        baked: CloudImage | None = None,
        cluster_id: str = PLAN_CLUSTER_ID,
    ) -> dict[str, Any]:
        from gpufleet.infra.aws.component import GpuClusterAws, GpuClusterAwsArgs

        args = GpuClusterAwsArgs(
            spec=spec,
            created_at=created_at,
            ssh_keys=tuple(ssh_keys),
            baked=baked,
            cluster_id=cluster_id,
            boot_configure=baked is not None and self.boot_configure,
        )
        return GpuClusterAws(spec.name, args).stack_outputs

    def check_tools(self, spec: ClusterSpec) -> None:
        from gpufleet.preflight.aws_tools import require_ssm_tools

        require_ssm_tools(spec)

    def replace_before_up(self, deployment: Mapping[str, Any]) -> dict[str, str]:
        """Fleets whose launch came short, fleets holding a lost node (``fleet.lost_fleets``) and a lost
        head or login instance (``lost.lost_instances``)."""
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        from gpufleet.infra.aws.fleet import lost_fleets, short_fleets
        from gpufleet.infra.aws.lost import lost_instances

        replace = {urn: "its last launch came short" for urn in short_fleets(deployment)}

        def client(region: str | None) -> Any:
            return boto3.client("ec2", region_name=region)

        try:
            lost = {**lost_instances(deployment, client), **lost_fleets(deployment, client)}
        except (BotoCoreError, ClientError) as exc:
            raise ProvisionError(
                f"cannot tell whether the cluster's fleet instances still run (DescribeInstances: {exc})",
                hint="give the deployer ec2:DescribeInstances (in ec2:Describe* of docs/aws.md's policy) "
                "and run 'gpufleet up' again; nothing was changed",
            ) from None
        return {**lost, **replace}

    # Its baked AMIs (``gpufleet.bake`` drives them): the base and builder of a bake, and the look-ups.
    images = AwsImages()

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
        # Two clusters of one name in a region share 10.0.0.0/17: the id tag picks this one's instance.
        cluster_id = state.cluster_id
        same_id = f' "Name=tag:{AWS_CLUSTER_ID_TAG},Values={cluster_id}"' if cluster_id else ""
        script.write_text(
            SSM_PROXY.format(
                cluster=spec.name, region=provider.region, tag=AWS_CLUSTER_TAG, script=script, same_id=same_id
            ),
            encoding="utf-8",
        )
        script.chmod(0o700)
        return Connection(
            user=IMAGE_USER,
            become=True,
            private_key_file=key,
            ssh_common_args=f'{known_hosts} -o ProxyCommand="{script} %h %p"',
        )

    def up(
        self,
        spec: ClusterSpec,
        state: ClusterState,
        reporter: Reporter,
        spec_path: Path | None,
        baked: BakedRecord | None = None,
    ) -> Inventory:
        """The stack, then (nodes that configure themselves) the munge key put as its secret's value: never
        through the program, so it is in no Pulumi state and no user data (``munge_secret.py``). Also when
        ``pulumi up`` failed after the secret was made: the nodes it launched wait for that value (and
        would wait their whole 900 s for nothing), and the next up would put it anyway."""
        try:
            inventory = super().up(spec, state, reporter, spec_path, baked=baked)
        except BaseException:
            if baked is not None:  # only a baked cluster's nodes configure themselves and have the secret
                self._publish_munge_key(spec, state, reporter, after_failure=True)
            raise
        if inventory.boot_configure:
            self._publish_munge_key(spec, state, reporter, after_failure=False)
        return inventory

    def _publish_munge_key(
        self, spec: ClusterSpec, state: ClusterState, reporter: Reporter, after_failure: bool
    ) -> None:
        """After a failed up: only when the secret exists (it may not have been made), and a problem is
        said, not raised (the up's own failure is the one to report)."""
        cluster_id = state.cluster_id
        if cluster_id is None:
            return
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        from gpufleet.infra.aws.munge_secret import publish, secret_name

        name = secret_name(spec.name, cluster_id)
        client = boto3.client("secretsmanager", region_name=_provider(spec).region)
        try:
            if publish(client, spec.name, cluster_id, state.ensure_munge_key()):
                reporter.info(f"munge key put in {name} (the nodes read it at boot)")
        except client.exceptions.ResourceNotFoundException:
            if not after_failure:
                raise
        except (BotoCoreError, ClientError, OSError) as exc:
            if not after_failure:
                raise
            reporter.info(f"the munge key could not be put in {name} after the failed up ({exc})")

    def inventory_from_outputs(
        self, spec: ClusterSpec, state: ClusterState, outputs: dict[str, Any]
    ) -> Inventory:
        """A compute group's nodes boot from one shared user data (``fleet.py``), which cannot name each
        host: the common role sets every host name to its inventory name."""
        inventory = super().inventory_from_outputs(spec, state, outputs)
        return inventory.model_copy(update={"set_hostname": True})

    expiry_scope = "region"

    def find_expired(self, scope: str) -> list[ExpiredCluster]:
        from gpufleet.infra.aws import leftovers

        return leftovers.find_expired(scope)

    def find_leftovers(self, spec: ClusterSpec, cluster_id: str | None = None) -> list[Leftover]:
        from gpufleet.infra.aws import leftovers

        return leftovers.find_leftovers(spec.name, _provider(spec).region, cluster_id=cluster_id)


# The table's row: the type checker holds it to the ``Backend`` protocol.
backend: Backend = AwsBackend()
