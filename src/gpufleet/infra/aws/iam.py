"""The nodes' instance profile, for SSM Session Manager (no SSH from the internet is needed) and, on a cluster
whose nodes configure themselves, their read of the munge key's secret (``munge_secret.py``).

Creates, when ``provider.ssm`` is on (the default) or the nodes boot a baked image:
- ``<name>-node-role``: an EC2 role under the path ``/gpufleet/`` (the leftover finder lists that path)
- ``<name>-node-ssm``: the AWS managed policy AmazonSSMManagedInstanceCore attached to it (with ``ssm``)
- ``<name>-node-profile``: the instance profile every launch template names
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules

IAM_PATH = "/gpufleet/"
SSM_DOC = "https://docs.aws.amazon.com/systems-manager/latest/userguide/setup-instance-permissions.html"


def build_instance_profile(
    name: str, region: str, opts: pulumi.ResourceOptions, *, ssm: bool = True
) -> aws.iam.InstanceProfile:
    assume = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = aws.iam.Role(
        f"{name}-node-role",
        path=IAM_PATH,
        assume_role_policy=json.dumps(assume),
        description="gpufleet node: SSM Session Manager" if ssm else "gpufleet node",
        opts=opts,
    )
    if ssm:
        aws.iam.RolePolicyAttachment(
            f"{name}-node-ssm",
            role=role.name,
            policy_arn=rules.managed_policy_arn(region, rules.SSM_POLICY),
            opts=opts,
        )
    return aws.iam.InstanceProfile(f"{name}-node-profile", path=IAM_PATH, role=role.name, opts=opts)
