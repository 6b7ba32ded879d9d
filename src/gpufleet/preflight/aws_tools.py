"""The local tools that reach AWS nodes: the ``aws`` CLI and its Session Manager plugin.

Nodes have no public IP; with ``provider.ssm`` (the default) every SSH connection runs the proxy script
``gpufleet.infra.aws.backend.SSM_PROXY``, which calls ``aws ec2 describe-instances`` and ``aws ssm
start-session``; the latter runs the ``session-manager-plugin`` executable ("you must install the Session
Manager plugin on your local machine", with AWS CLI 1.16.12 or later:
https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html,
read 2026-11-24). Without them Ansible only reports every node unreachable, after the fleet is billing
(AWS audit 2026-11-24 N15). ``gpufleet up`` refuses before it creates anything. ``gpufleet check`` says
nothing of them: its findings are the spec's, the same on every machine (the program runs them too).
"""

from __future__ import annotations

import os
import shutil

from gpufleet.errors import EnvironmentProblem
from gpufleet.spec.model import AwsProvider, ClusterSpec

# AWS CLI v2 on Linux x86_64 ("Installing or updating to the latest version of the AWS CLI",
# https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html, read 2026-11-24).
AWS_CLI_INSTALL = (
    'curl "https://awscli.amazonaws.com/awscli-exe-linux-x86_64.zip" -o awscliv2.zip && unzip awscliv2.zip '
    "&& sudo ./aws/install   (macOS: brew install awscli)"
)
# The plugin's Debian/Ubuntu package ("Install the Session Manager plugin on Debian Server and Ubuntu
# Server", https://docs.aws.amazon.com/systems-manager/latest/userguide/install-plugin-debian-and-ubuntu.html,
# read 2026-11-24).
PLUGIN_INSTALL = (
    'curl "https://s3.amazonaws.com/session-manager-downloads/plugin/latest/ubuntu_64bit/'
    'session-manager-plugin.deb" -o session-manager-plugin.deb && sudo dpkg -i session-manager-plugin.deb   '
    "(macOS: brew install --cask session-manager-plugin)"
)
TOOLS = (("aws", AWS_CLI_INSTALL), ("session-manager-plugin", PLUGIN_INSTALL))


def missing_ssm_tools(path: str | None = None) -> list[str]:
    """One line per tool the SSM proxy needs that is not on ``path`` (default ``$PATH``): its name and
    the command that installs it."""
    search = os.environ.get("PATH", "") if path is None else path
    return [
        f"'{tool}' is not on PATH; install it: {how}"
        for tool, how in TOOLS
        if not shutil.which(tool, path=search)
    ]


def uses_ssm(spec: ClusterSpec) -> bool:
    return isinstance(spec.provider, AwsProvider) and spec.provider.ssm


def require_ssm_tools(spec: ClusterSpec, path: str | None = None) -> None:
    """Refuse, before anything is created, an ``up`` whose nodes this machine could not reach."""
    missing = missing_ssm_tools(path) if uses_ssm(spec) else []
    if missing:
        raise EnvironmentProblem(
            "cannot reach the nodes of an AWS cluster from this machine: " + "; ".join(missing),
            hint="gpufleet reaches the nodes (no public IP) through SSM Session Manager, which runs the aws "
            "CLI and its session-manager-plugin here; install them and run 'gpufleet up' again (nothing "
            "was created), or set provider.ssm: false to reach the nodes over a network of your own",
        )
