"""The cluster's munge key for nodes that configure themselves: a Secrets Manager secret only they may read.

Why a secret and not the user data: user data is readable by anyone who may call
``DescribeInstanceAttribute`` on the instance and by every process on the node that reaches IMDS, and it is
kept for the instance's life; a munge key there lets any of them forge credentials the whole cluster
trusts (munge(7): "any process with access to the key can create credentials"). ParallelCluster keeps its
munge key in Secrets Manager for the same reason (``MungeKeySecretArn``, anchors 11-22 section 1.3).
Why not fetched from the head: the head is itself a node that configures itself at boot, in parallel with
the others, and a fetch would need a credential of its own to hand out first.

The program makes (only for a cluster that boots a baked image, whose nodes configure themselves):
- ``<name>-munge-key``: the secret ``gpufleet/<cluster>-<cluster id>/munge-key``, with no value (the value
  never enters the Pulumi state), deleted at once on destroy (``recovery_window_in_days=0``: a secret in
  its recovery window keeps its name and counts as a leftover);
- ``<name>-node-munge-read``: an inline policy of the nodes' role allowing ``secretsmanager:GetSecretValue``
  on that one ARN and nothing else (the AWS-managed key ``aws/secretsmanager`` encrypts it: no KMS grant).

``gpufleet up`` then puts the state's munge key as the secret's binary value (``publish``), after the
program ran; a node that boots first waits for it (``gpufleet.node.boot_configure.munge_key``).
https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html and
API_PutSecretValue.html, read 2026-11-27.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws


def secret_name(cluster: str, cluster_id: str) -> str:
    return f"gpufleet/{cluster}-{cluster_id}/munge-key"


def endpoint(region: str) -> str:
    """The Secrets Manager endpoint boto3 calls for ``region`` (its partition's domain; FIPS or dual-stack
    where the user's configuration asks: AWS_USE_FIPS_ENDPOINT, use_dualstack_endpoint, endpoint_url_...),
    which the node calls too (``gpufleet.node.boot_configure.secretsmanager_request``). Needs no
    credentials."""
    import boto3

    return str(boto3.session.Session().client("secretsmanager", region_name=region).meta.endpoint_url)


def read_policy(secret_arn: str) -> str:
    """The nodes' one permission on the secret."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": secret_arn}
            ],
        }
    )


def build_munge_secret(
    name: str, cluster: str, cluster_id: str, role: pulumi.Output[str | None], opts: pulumi.ResourceOptions
) -> aws.secretsmanager.Secret:
    """The secret and the nodes' read of it; ``role``: the nodes' role's name (the instance profile's)."""
    secret = aws.secretsmanager.Secret(
        f"{name}-munge-key",
        name=secret_name(cluster, cluster_id),
        description=f"gpufleet {cluster}: the munge key its nodes read at boot (value put by gpufleet up)",
        recovery_window_in_days=0,
        opts=opts,
    )
    aws.iam.RolePolicy(
        f"{name}-node-munge-read",
        role=role.apply(str),
        policy=secret.arn.apply(read_policy),
        opts=opts,
    )
    return secret


def publish(client: Any, cluster: str, cluster_id: str, key_file: Path) -> bool:
    """Put the munge key as the secret's value unless it already is (``client``: boto3's secretsmanager).
    True when it was put."""
    name = secret_name(cluster, cluster_id)
    key = key_file.read_bytes()
    try:
        current = client.get_secret_value(SecretId=name).get("SecretBinary")
    except client.exceptions.ResourceNotFoundException:
        current = None  # a secret with no value yet answers so too
    if current == key:
        return False
    client.put_secret_value(SecretId=name, SecretBinary=key)
    return True
