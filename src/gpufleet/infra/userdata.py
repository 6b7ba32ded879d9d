"""The user data of a cloud node (AWS and GCP alike): only what Ansible needs to take over. Creates nothing.

cloud-config that sets the host name from the spec (when one node boots from it), installs python3
and authorizes the SSH public keys (the spec's ``access.ssh_public_key`` and the keys the caller adds,
such as the cluster's own key that ``gpufleet up`` makes) for the image's default user (``IMAGE_USER``,
which has passwordless sudo). Root takes no SSH login (``disable_root: true``): Ansible connects as the
image's user and becomes root.
Drivers, EFA, Slurm and everything else are the Ansible roles' work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import yaml

from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    import pulumi

# The default user of every image gpufleet boots on AWS and GCP (Ubuntu's, and the DLAMIs built on it).
IMAGE_USER = "ubuntu"


def authorized_keys(spec: ClusterSpec, extra: Sequence[str] = ()) -> list[str]:
    keys = [spec.access.ssh_public_key] if spec.access.ssh_public_key else []
    keys.extend(key.strip() for key in extra if key.strip())
    return list(dict.fromkeys(keys))


def render_user_data(host: str | None, keys: list[str]) -> str:
    """``host`` None: user data shared by a whole launch request (an AWS fleet), which leaves the host
    name to Ansible (the inventory's ``set_hostname``: roles/common's ``common_set_hostname``)."""
    named = {"hostname": host, "preserve_hostname": False, "manage_etc_hosts": True} if host else {}
    config = {
        **named,
        "packages": ["python3"],
        "disable_root": True,
        "ssh_authorized_keys": keys,
    }
    return "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False, width=1000)


def user_data(
    spec: ClusterSpec, host: str | None, extra: Sequence[pulumi.Input[str]] = ()
) -> pulumi.Input[str]:
    """``render_user_data`` of the spec's key and ``extra``. A text while every key is one; an Output when a
    key is (the key ``stacks/`` makes per stack with pulumi-tls, ``gpufleet.infra.stack_access``)."""
    if all(isinstance(key, str) for key in extra):
        return render_user_data(host, authorized_keys(spec, [str(key) for key in extra]))
    import pulumi

    return pulumi.Output.all(*extra).apply(lambda keys: render_user_data(host, authorized_keys(spec, keys)))
