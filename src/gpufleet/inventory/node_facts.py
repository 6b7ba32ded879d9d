"""The per-cluster facts a node needs to configure itself at boot, and nothing secret (issue 34 item 2).

Each backend hands every node one ``NodeFacts`` document (JSON, a few KB): the AWS program in the
instance's user data (cloud-init writes it to ``FACTS_FILE``), the GCP program as the instance metadata
key ``METADATA_KEY``, the local backend as a read-only bind mount. The baked unit
(``gpufleet-node-configure.service``, roles/boot_configure) reads it and runs the configure phase of
playbooks/site.yml against the node itself (``gpufleet.node.boot_configure``).

What is in it: the cluster's name and provider, the node's inventory name (None on an AWS fleet: the node
reads its ``gpufleet:host`` instance tag at boot) and groups, the controller's name and private address
(None on the controller itself), the fabric, the filesystem record, the node's own host variables (its
CPUs and memory for Slurm, its GPUs, the fabric facts that are the NCCL environment's inputs), the cluster
variables the roles read (software pins, the baked image's hash, the NCCL env file path ...), where the
node writes its result, and where it reads the munge key (``MungeKeyFrom``: a path or a secret's ARN,
never the key). What is not: the munge key, the cluster's SSH private key, any token. Instance user data
and metadata are readable by every process on the node that can reach the metadata service and are kept
in the cloud's API (``DescribeInstanceAttribute``, ``instances.get``) for anyone with read access to the
instance, so a secret there is a secret given to every reader of the account (tests/infra/*'s user-data
checks hold the programs to this).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.inventory.model import GROUP_OF_ROLE, Host, Inventory
from gpufleet.spec.model import ClusterSpec, FabricKind, Role

# Where the node finds its facts (cloud-init writes it; the local backend mounts its folder read-only).
# Outside /etc/gpufleet: every job's container gets that folder (roles/containers' enroot fstab, a plain
# bind), and enroot as a user cannot bind a folder that holds a mount made outside its user namespace
# ("enroot-mount: failed to mount: /etc/gpufleet ...: Invalid argument": the local cluster run of
# 2026-11-28 02:20, with the facts and the munge key mounted there).
FACTS_DIR = "/var/lib/gpufleet/boot"
FACTS_FILE = f"{FACTS_DIR}/node-facts.json"
# GCP: the instance metadata key the facts are under (the node reads it from the metadata server).
METADATA_KEY = "gpufleet-node-facts"
# Where the node writes its result: on its own disk, and on the shared filesystem under the mount point.
RESULT_FILE = "/var/lib/gpufleet/configure-result.json"
SHARED_RESULTS = ".gpufleet/configure"
# Where a local node's munge key is mounted (read-only, from the cluster's state folder; outside FACTS_DIR,
# whose read-only mount could not hold its mount point).
LOCAL_MUNGE_KEY = "/var/lib/gpufleet/cluster-munge.key"
# EC2's user data limit (16 KB before base64): the facts must leave room for the cloud-config around them.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html, read 2026-11-27.
USER_DATA_LIMIT = 16 * 1024
# Connection variables of the inventory that have no meaning on the node (it runs with -c local).
_NOT_ON_NODE = ("ansible_user", "ansible_ssh_private_key_file", "ansible_ssh_common_args", "ansible_become")


class MungeKeyFrom(BaseModel):
    """Where the node reads the cluster's munge key: a file mounted read-only (local nodes), or an AWS
    Secrets Manager secret the instance's role may read and nothing else may (``infra/aws/munge_secret.py``);
    ``push``: nowhere, the key comes with ``gpufleet configure``'s push, and the node's unit does not run
    (GCP until its Secret Manager read is built: docs/boot-configure.md). Never the key itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["file", "aws-secretsmanager", "push"]
    path: str | None = None
    secret_arn: str | None = None
    region: str | None = None
    # The Secrets Manager endpoint the node calls (its SigV4 host): boto3's for the region at gpufleet up
    # (``infra/aws/munge_secret.endpoint``), so another partition's domain (amazonaws.com.cn, c2s.ic.gov,
    # amazonaws.eu...) and the user's FIPS or dual-stack configuration hold on the node too.
    endpoint: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> MungeKeyFrom:
        if self.kind == "file" and not self.path:
            raise ValueError("munge key from a file: path is required")
        if self.kind == "aws-secretsmanager" and not (self.secret_arn and self.region and self.endpoint):
            raise ValueError(
                "munge key from AWS Secrets Manager: secret_arn, region and endpoint are required"
            )
        return self


class PeerGroup(BaseModel):
    """The compute nodes of one node group, as a node's own play needs them: their names (the spec's
    ``host_names``, rebuilt from ``base`` and ``count`` to keep the user data small), their host variables
    (the controller's slurm.conf GresTypes, gres.conf's lines, MaxNodeCount, the roles' count checks) and,
    where known before they boot, their addresses; the play never connects to them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str
    count: int = Field(ge=1)
    groups: list[str]
    host_vars: dict[str, Any]
    addresses: list[str] | None = Field(
        default=None, description="their private IPs in names() order, where known before they boot (local)"
    )

    def names(self) -> list[str]:
        """``ClusterSpec.host_names``, rebuilt (``gpufleet.node.boot_configure.peer_names``: the node's)."""
        if self.count == 1 and GROUP_OF_ROLE[Role.COMPUTE] not in self.groups:
            return [self.base]
        width = max(1, len(str(self.count - 1)))
        return [f"{self.base}-{index:0{width}d}" for index in range(self.count)]


def peer_groups(
    spec: ClusterSpec, host_vars: dict[str, dict[str, Any]], addresses: dict[str, str] | None = None
) -> list[PeerGroup]:
    """The spec's compute groups as peers, each with the host variables ``host_vars`` has for its group
    (and their ``addresses`` by host name, where known)."""
    return [
        PeerGroup(
            base=f"{spec.name}-{group.name}",
            count=group.count,
            groups=[GROUP_OF_ROLE[role] for role in group.roles],
            host_vars=host_vars[group.name],
            addresses=[addresses[name] for name in spec.host_names(group)] if addresses else None,
        )
        for group in spec.compute_groups
    ]


class NodeFacts(BaseModel):
    """What one node needs to run the configure phase on itself (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    cluster: str
    provider: str
    host: str | None = Field(
        description="the node's inventory name; None: read the gpufleet:host tag (AWS fleet)"
    )
    group: str = Field(description="the spec's node group")
    groups: list[str] = Field(
        min_length=1, description="its inventory groups: slurm_controller, slurm_login, compute"
    )
    controller: str
    controller_address: str | None = Field(description="the controller's private IP; None on the controller")
    fabric: FabricKind
    filesystem: dict[str, Any]
    host_vars: dict[str, Any] = Field(
        description="the node's host variables as the inventory writes them (gpufleet_cpus, gpufleet_gpus, "
        "the fabric facts: the NCCL environment's inputs), less its address, which the node reads itself"
    )
    cluster_vars: dict[str, Any] = Field(
        description="the inventory's all.vars less the connection: software pins, the baked image's hash, "
        "gpufleet_configure_on_node true"
    )
    baked_image_hash: str = Field(min_length=8, description="the image the node must run: it refuses another")
    result_file: str = RESULT_FILE
    shared_results: str | None = Field(
        description="the folder on the shared filesystem the node copies its result into; None: no shared "
        "filesystem (gpufleet configure then reads each node's result_file over SSH)"
    )
    munge_key: MungeKeyFrom
    peers: list[PeerGroup] = Field(default_factory=list, description="the cluster's compute groups")

    def render(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> NodeFacts:
        return cls.model_validate_json(text)


def shared_results_dir(filesystem: dict[str, Any]) -> str | None:
    """The results folder on the cluster's shared filesystem (None without one)."""
    mount = filesystem.get("mount_point") if filesystem.get("kind", "none") != "none" else None
    return f"{str(mount).rstrip('/')}/{SHARED_RESULTS}" if mount else None


def cluster_vars_on_node(inventory: Inventory) -> dict[str, Any]:
    """``all.vars`` of the node's own play: the inventory's, with ``configure_on_node`` set and the
    connection's variables left out."""
    on_node = inventory.model_copy(update={"configure_on_node": True, "boot_configure": True})
    rendered = on_node.to_ansible()["all"]["vars"]
    return {key: value for key, value in rendered.items() if key not in _NOT_ON_NODE}


def host_vars_on_node(host: Host) -> dict[str, Any]:
    rendered = Inventory._host_vars(host)
    rendered.pop("ansible_host", None)
    rendered.pop("gpufleet_private_ip", None)
    return rendered


def facts_for(
    inventory: Inventory,
    host: Host,
    *,
    group: str,
    munge_key: MungeKeyFrom,
    peers: list[PeerGroup] | None = None,
) -> NodeFacts:
    """The facts of ``host`` of a cluster whose inventory is known (the local backend); ``peers`` for the
    controller."""
    if inventory.baked_image_hash is None:
        raise ValueError(f"{host.name}: nodes configure themselves only from a baked image (no hash)")
    controller = inventory.controller
    children = inventory.to_ansible()["all"]["children"]
    return NodeFacts(
        cluster=inventory.cluster,
        provider=inventory.provider,
        host=host.name,
        group=group,
        groups=[name for name, members in children.items() if host.name in members["hosts"]],
        controller=controller.name,
        controller_address=None if controller.name == host.name else controller.private_ip,
        fabric=inventory.fabric,
        filesystem=inventory.filesystem,
        host_vars=host_vars_on_node(host),
        cluster_vars=cluster_vars_on_node(inventory),
        baked_image_hash=inventory.baked_image_hash,
        shared_results=shared_results_dir(inventory.filesystem),
        munge_key=munge_key,
        peers=peers or [],
    )


def facts_for_record(
    record: dict[str, Any],
    *,
    cluster: str,
    provider: str,
    fabric: FabricKind,
    filesystem: dict[str, Any],
    software: dict[str, Any],
    group: str,
    has_login: bool,
    controller: str,
    controller_address: str | None,
    baked_image_hash: str,
    munge_key: MungeKeyFrom,
    named: bool = True,
    set_hostname: bool = False,
    peers: list[PeerGroup] | None = None,
) -> NodeFacts:
    """The facts of a cloud node from its stack host record (``infra.outputs.host_record``, every value
    resolved) as a program knows it before the node exists: its own address is read on the node.
    ``named`` False: a node of a fleet, whose name the node reads from its instance's tag at boot."""
    host = Host.model_validate({**record, "address": "0.0.0.0", "private_ip": "0.0.0.0"})
    inventory = Inventory(
        cluster=cluster,
        provider=provider,
        fabric=fabric,
        hosts=[host],
        filesystem=filesystem,
        software=software,
        baked_image_hash=baked_image_hash,
        set_hostname=set_hostname,
    )
    roles = list(host.roles)
    groups = [GROUP_OF_ROLE[role] for role in roles]
    if Role.CONTROLLER in roles and not has_login and Role.LOGIN not in roles:
        groups.append(GROUP_OF_ROLE[Role.LOGIN])
    return NodeFacts(
        cluster=cluster,
        provider=provider,
        host=host.name if named else None,
        group=group,
        groups=groups,
        controller=controller,
        controller_address=controller_address,
        fabric=fabric,
        filesystem=filesystem,
        host_vars=host_vars_on_node(host),
        cluster_vars=cluster_vars_on_node(inventory),
        baked_image_hash=baked_image_hash,
        shared_results=shared_results_dir(filesystem),
        munge_key=munge_key,
        peers=peers or [],
    )
