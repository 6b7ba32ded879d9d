"""Security groups: what may talk to the nodes and the file system. Nothing is open to 0.0.0.0/0.

Creates:
- ``<name>-sg``: the nodes' group. ``<name>-sg-self-in`` / ``<name>-sg-self-out``: all traffic in and out
  to the group itself, as EFA's OS-bypass traffic requires (EFA_SG_DOC); ``<name>-sg-https-out`` and
  ``<name>-sg-http-out``: TCP 443 and 80 out to the internet (through the NAT) for packages and SSM;
- with ``access.allowed_cidrs``, ``<name>-login-sg``, attached to the login node only, and
  ``<name>-login-sg-ssh-<i>``: SSH (22) in from each CIDR (none by default: access is through SSM Session
  Manager); compute nodes and a separate controller never take SSH from outside the cluster
- with FSx for Lustre, ``<name>-fsx-sg``: the file system's group, with the Lustre ports (TCP 988 and
  1018-1023) allowed in from the nodes' group and from itself, and the nodes' group allowed out to it
  and in from it on the same ports (FSX_ACCESS_DOC); for an EFA-enabled file system, all traffic within
  the file system's group and between it and the nodes' group (``<name>-*-efa-in``/``-out``)
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import aws as rules
from gpufleet.spec.model import ClusterSpec

EFA_SG_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security"
INTERNET_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True)
class SecurityGroups:
    nodes: aws.ec2.SecurityGroup
    fsx: aws.ec2.SecurityGroup | None
    login: aws.ec2.SecurityGroup | None = None  # SSH from access.allowed_cidrs, login nodes only


def build_security_groups(
    name: str,
    spec: ClusterSpec,
    vpc_id: pulumi.Input[str],
    with_fsx: bool,
    opts: pulumi.ResourceOptions,
    *,
    fsx_efa: bool = False,
) -> SecurityGroups:
    nodes = aws.ec2.SecurityGroup(
        f"{name}-sg",
        vpc_id=vpc_id,
        description=f"gpufleet cluster {spec.name}: nodes (EFA needs all traffic to itself)",
        tags={"Name": f"{name}-nodes"},
        opts=opts,
    )
    aws.vpc.SecurityGroupIngressRule(
        f"{name}-sg-self-in",
        security_group_id=nodes.id,
        referenced_security_group_id=nodes.id,
        ip_protocol="-1",
        description="all traffic from the cluster (EFA)",
        opts=opts,
    )
    aws.vpc.SecurityGroupEgressRule(
        f"{name}-sg-self-out",
        security_group_id=nodes.id,
        referenced_security_group_id=nodes.id,
        ip_protocol="-1",
        description="all traffic to the cluster (EFA)",
        opts=opts,
    )
    internet_egress(f"{name}-sg", nodes, "through the NAT (packages, SSM)", opts)
    login = _login_group(name, spec, vpc_id, opts)
    if not with_fsx:
        return SecurityGroups(nodes=nodes, fsx=None, login=login)

    fsx = aws.ec2.SecurityGroup(
        f"{name}-fsx-sg",
        vpc_id=vpc_id,
        description=f"gpufleet cluster {spec.name}: FSx for Lustre",
        tags={"Name": f"{name}-fsx"},
        opts=opts,
    )
    # Lustre's ports both ways between the file servers and between them and the nodes: (rule, its name's
    # label, the group it belongs to, the peer group, what the description says).
    ingress, egress = aws.vpc.SecurityGroupIngressRule, aws.vpc.SecurityGroupEgressRule
    lustre = (
        (ingress, "fsx-sg-nodes-in", fsx, nodes, "from the nodes"),
        (ingress, "fsx-sg-self-in", fsx, fsx, "between file servers"),
        (egress, "fsx-sg-self-out", fsx, fsx, "between file servers"),
        (egress, "fsx-sg-nodes-out", fsx, nodes, "to the nodes"),
        (egress, "sg-fsx-out", nodes, fsx, "to the file system"),
        (ingress, "sg-fsx-in", nodes, fsx, "from the file system"),
    )
    for low, high in rules.LUSTRE_PORTS:
        ports = f"{low}" if low == high else f"{low}-{high}"
        for rule, label, group, peer, what in lustre:
            rule(
                f"{name}-{label}-{ports}",
                security_group_id=group.id,
                referenced_security_group_id=peer.id,
                description=f"Lustre {ports} {what}",
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
                opts=opts,
            )
    if fsx_efa:
        _fsx_efa_rules(name, nodes, fsx, opts)
    return SecurityGroups(nodes=nodes, fsx=fsx, login=login)


def _fsx_efa_rules(
    name: str, nodes: aws.ec2.SecurityGroup, fsx: aws.ec2.SecurityGroup, opts: pulumi.ResourceOptions
) -> None:
    """An EFA-enabled file system needs all traffic within its group and to and from its clients
    (fsx.FSX_EFA_DOC), as EFA between nodes does."""
    pairs = (("fsx-sg-self", fsx, fsx), ("fsx-sg-nodes", fsx, nodes), ("sg-fsx", nodes, fsx))
    for label, group, peer in pairs:
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-{label}-efa-in",
            security_group_id=group.id,
            referenced_security_group_id=peer.id,
            ip_protocol="-1",
            description="all traffic for EFA to FSx for Lustre",
            opts=opts,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-{label}-efa-out",
            security_group_id=group.id,
            referenced_security_group_id=peer.id,
            ip_protocol="-1",
            description="all traffic for EFA to FSx for Lustre",
            opts=opts,
        )


def _login_group(
    name: str, spec: ClusterSpec, vpc_id: pulumi.Input[str], opts: pulumi.ResourceOptions
) -> aws.ec2.SecurityGroup | None:
    """SSH in from ``access.allowed_cidrs``, for the login node alone (None when no CIDR is listed)."""
    if not spec.access.allowed_cidrs:
        return None
    login = aws.ec2.SecurityGroup(
        f"{name}-login-sg",
        vpc_id=vpc_id,
        description=f"gpufleet cluster {spec.name}: SSH to the login node from access.allowed_cidrs",
        tags={"Name": f"{name}-login"},
        opts=opts,
    )
    ssh_ingress(f"{name}-login-sg", login, spec, opts)
    return login


def ssh_ingress(
    prefix: str, group: aws.ec2.SecurityGroup, spec: ClusterSpec, opts: pulumi.ResourceOptions
) -> None:
    """SSH into ``group`` from each of ``access.allowed_cidrs`` (rules ``<prefix>-ssh-<index>``)."""
    for index, cidr in enumerate(spec.access.allowed_cidrs):
        aws.vpc.SecurityGroupIngressRule(
            f"{prefix}-ssh-{index}",
            security_group_id=group.id,
            cidr_ipv4=str(cidr),
            ip_protocol="tcp",
            from_port=22,
            to_port=22,
            description="SSH from access.allowed_cidrs",
            opts=opts,
        )


def internet_egress(
    prefix: str, group: aws.ec2.SecurityGroup, why: str, opts: pulumi.ResourceOptions
) -> None:
    """HTTPS and HTTP out of ``group`` to anywhere (rules ``<prefix>-<https|http>-out``), nothing else."""
    for label, port in INTERNET_PORTS.items():
        aws.vpc.SecurityGroupEgressRule(
            f"{prefix}-{label}-out",
            security_group_id=group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="tcp",
            from_port=port,
            to_port=port,
            description=f"{label} out {why}",
            opts=opts,
        )
