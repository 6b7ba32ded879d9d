"""The user data of a cloud node (AWS and GCP alike): only what Ansible needs to take over. Creates nothing.

cloud-config that sets the host name from the spec, installs python3 and authorizes the SSH public keys
(the spec's ``access.ssh_public_key`` and the keys the caller adds, such as the cluster's own key that
``gpufleet up`` makes) for the image's default user (``IMAGE_USER``, which has passwordless sudo).
Root takes no SSH login (``disable_root: true``): Ansible connects as the image's user and becomes root.
Drivers, EFA, Slurm and everything else are the Ansible roles' work.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

from gpufleet.spec.model import ClusterSpec

# The default user of every image gpufleet boots on AWS and GCP (Ubuntu's, and the DLAMIs built on it).
IMAGE_USER = "ubuntu"


def authorized_keys(spec: ClusterSpec, extra: Sequence[str] = ()) -> list[str]:
    keys = [spec.access.ssh_public_key] if spec.access.ssh_public_key else []
    keys.extend(key.strip() for key in extra if key.strip())
    return list(dict.fromkeys(keys))


def render_user_data(host: str, keys: list[str]) -> str:
    config = {
        "hostname": host,
        "preserve_hostname": False,
        "manage_etc_hosts": True,
        "packages": ["python3"],
        "disable_root": True,
        "ssh_authorized_keys": keys,
    }
    return "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False, width=1000)
