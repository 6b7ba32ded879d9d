"""The user data of a cloud node (AWS and GCP alike): only what Ansible needs to take over. Creates nothing.

cloud-config that sets the host name from the spec (when one node boots from it), installs python3 (not
on a node of the baked image, which has it) and authorizes the SSH public keys (the spec's
``access.ssh_public_key`` and the keys the caller adds, such as the cluster's own key that ``gpufleet up``
makes) for the image's default user (``IMAGE_USER``, which has passwordless sudo). Root takes no SSH login
(``disable_root: true``): Ansible connects as the image's user and becomes root.
Drivers, EFA, Slurm and everything else are the Ansible roles' work.

On a cluster whose nodes boot a baked image, the user data also carries the node's facts
(``gpufleet.inventory.node_facts``: nothing secret), which cloud-init writes to ``FACTS_FILE`` for the
baked unit that configures the node at boot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import yaml

from gpufleet.errors import ProvisionError
from gpufleet.inventory.node_facts import FACTS_FILE, USER_DATA_LIMIT
from gpufleet.spec.model import ClusterSpec

if TYPE_CHECKING:
    import pulumi

# The default user of every image gpufleet boots on AWS and GCP (Ubuntu's, and the DLAMIs built on it).
IMAGE_USER = "ubuntu"


def authorized_keys(spec: ClusterSpec, extra: Sequence[str] = ()) -> list[str]:
    keys = [spec.access.ssh_public_key] if spec.access.ssh_public_key else []
    keys.extend(key.strip() for key in extra if key.strip())
    return list(dict.fromkeys(keys))


def render_user_data(host: str | None, keys: list[str], facts: str | None = None) -> str:
    """``host`` None: user data shared by a whole launch request (an AWS fleet), which leaves the host
    name to Ansible (the inventory's ``set_hostname``: roles/common's ``common_set_hostname``). ``facts``:
    the node's facts (``NodeFacts.render``), written by cloud-init where the baked unit reads them."""
    named = {"hostname": host, "preserve_hostname": False, "manage_etc_hosts": True} if host else {}
    # python3 for Ansible, from the image's archive: a node of the baked image (one with facts) has it, and
    # installing it would cost every node an apt-get update through the NAT for nothing.
    packages = {"packages": ["python3"]} if facts is None else {}
    config: dict[str, object] = {
        **named,
        **packages,
        "disable_root": True,
        "ssh_authorized_keys": keys,
    }
    if facts is not None:
        config["write_files"] = [
            {"path": FACTS_FILE, "owner": "root:root", "permissions": "0644", "content": facts + "\n"}
        ]
    text = "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False, width=1000)
    if len(text.encode()) > USER_DATA_LIMIT:
        raise ProvisionError(
            f"the user data of {host or 'a fleet node'} is {len(text.encode())} bytes, over EC2's "
            f"{USER_DATA_LIMIT} (its node facts are {len((facts or '').encode())})",
            hint="fewer software pins or shorter SSH keys; or configure by push "
            "(GPUFLEET_CONFIGURE_FROM=here)",
        )
    return text


def user_data(
    spec: ClusterSpec,
    host: str | None,
    extra: Sequence[pulumi.Input[str]] = (),
    facts: pulumi.Input[str] | None = None,
) -> pulumi.Input[str]:
    """``render_user_data`` of the spec's key and ``extra`` (and ``facts``). A text while every key (and the
    facts) is one; an Output when one is (the key ``stacks/`` makes per stack with pulumi-tls,
    ``gpufleet.infra.stack_access``; facts naming the controller's address)."""
    if all(isinstance(key, str) for key in extra) and (facts is None or isinstance(facts, str)):
        return render_user_data(host, authorized_keys(spec, [str(key) for key in extra]), facts)
    import pulumi

    return pulumi.Output.all(facts, *extra).apply(
        lambda values: render_user_data(host, authorized_keys(spec, values[1:]), values[0])
    )


def node_facts_output(
    spec: ClusterSpec,
    record: dict[str, Any],
    *,
    group: str,
    controller: str,
    controller_ip: pulumi.Input[str] | None,
    filesystem: dict[str, Any],
    image_hash: str,
    secret_arn: pulumi.Input[str] | None,
    region: str | None = None,
    endpoint: str | None = None,
    named: bool,
    set_hostname: bool = False,
    peers: dict[str, dict[str, Any]] | None = None,
) -> pulumi.Output[str]:
    """A cloud node's facts (``NodeFacts.render``) as the program knows them: the controller's address, the
    filesystem's names and the munge key's secret are the cloud's outputs. ``secret_arn`` None: the node
    gets its munge key by push (``MungeKeyFrom`` kind ``push``), and its unit does not run; ``endpoint``: the
    Secrets Manager endpoint the node calls for it (``MungeKeyFrom.endpoint``). ``peers``: the
    controller's, each compute group's host record (``infra.outputs.host_record``) by group name."""
    import pulumi

    from gpufleet.inventory.model import Host
    from gpufleet.inventory.node_facts import MungeKeyFrom, facts_for_record, host_vars_on_node, peer_groups

    fs_keys = sorted(filesystem)

    def render(values: list[Any]) -> str:
        address, arn, *fs_values = values
        munge = (
            MungeKeyFrom(kind="push")
            if arn is None
            else MungeKeyFrom(kind="aws-secretsmanager", secret_arn=arn, region=region, endpoint=endpoint)
        )
        return facts_for_record(
            record,
            cluster=spec.name,
            provider=spec.provider.kind,
            fabric=spec.fabric.kind,
            filesystem=dict(zip(fs_keys, fs_values, strict=True)),
            software=spec.software.model_dump(mode="json"),
            group=group,
            has_login=bool(spec.login_groups),
            controller=controller,
            controller_address=address,
            baked_image_hash=image_hash,
            munge_key=munge,
            named=named,
            set_hostname=set_hostname,
            peers=peer_groups(spec, peer_vars) if peers is not None else None,
        ).render()

    peer_vars = {
        group: host_vars_on_node(
            Host.model_validate({**record, "address": "0.0.0.0", "private_ip": "0.0.0.0"})
        )
        for group, record in (peers or {}).items()
    }

    return pulumi.Output.all(controller_ip, secret_arn, *(filesystem[key] for key in fs_keys)).apply(render)
