"""``GpuClusterAws``: a whole GPU cluster on AWS from one cluster spec.

Type token ``gpufleet:aws:GpuCluster``. Before anything is registered it runs the preflight checks
(common and AWS) and raises ``SpecError`` listing every error. Then it creates, as its children:
- ``<name>-provider``: an explicit AWS provider in the spec's region whose default tags
  (``gpufleet:cluster``, ``gpufleet:expires-at`` and the spec's tags) reach every taggable resource;
- the network (``network.py``), security groups (``security.py``), instance profile (``iam.py``), a
  cluster placement group (``capacity.py``), one launch template per node group (``launch_template.py``);
- ``<cluster>-<group>-fleet``: one EC2 Fleet of type ``instant`` per compute group, all its nodes in one
  all-or-nothing launch request (``fleet.py``), each host's private IP read back from its instance;
- ``<cluster>-<group>[-<i>]``: one instance per host of the other groups (the controller group is the head
  node, and the login node unless a login group exists, with a plain ENA interface), with the user data
  of ``userdata.py``;
- the FSx for Lustre file system and its S3 association (``fsx.py``).

With ``args.baked`` (the AMI ``gpufleet image build`` made from the spec's roles and pins), every group
boots it; the output ``baked_image_hash`` is its hash while every launch template holds that image (a
template keeps the image of its first ``pulumi up``, so nodes made before the bake stay as they are and
the hash stays null: ``configure`` then runs the install phase on them).

``stack_outputs`` holds the outputs in ``gpufleet.infra.outputs``' shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.catalog import Catalog, InstanceType, load_catalog
from gpufleet.catalog import aws_interfaces as interfaces
from gpufleet.catalog.images import load_image_manifests
from gpufleet.errors import SpecError
from gpufleet.infra import outputs, tags
from gpufleet.infra.aws import capacity, fsx, iam, munge_secret, network, security
from gpufleet.infra.aws.ami import Images, family_for
from gpufleet.infra.aws.fleet import build_fleet, fleet_hosts, launched_by_fleet
from gpufleet.infra.aws.launch_template import build_launch_template
from gpufleet.infra.images import CloudImage
from gpufleet.infra.userdata import node_facts_output, user_data
from gpufleet.preflight import require_no_errors
from gpufleet.spec.model import AwsProvider, ClusterSpec, FsxLustreFilesystem, NodeGroup

TYPE_TOKEN = "gpufleet:aws:GpuCluster"


@dataclass(frozen=True)
class GpuClusterAwsArgs:
    spec: ClusterSpec
    created_at: datetime
    # Public keys authorized on every node besides the spec's (gpufleet up adds the cluster's own key;
    # stacks/ the stack's key, an Output when pulumi-tls makes it).
    ssh_keys: tuple[pulumi.Input[str], ...] = ()
    # The baked AMI of the spec's current roles and pins, when one exists (gpufleet up looks it up).
    baked: CloudImage | None = None
    # The cluster's id (gpufleet.state.new_cluster_id: made at the first up, kept in the state and the
    # stack), tagged on every resource; the offline plan's stands in where no cluster exists yet.
    cluster_id: str = tags.PLAN_CLUSTER_ID
    # The nodes configure themselves at boot (with ``baked``): their facts in the user data, the munge key's
    # secret. ``AwsBackend`` sets it for a cluster made from a baked image (and keeps it for one that was);
    # never for nodes made before the bake, whose user data must not change (the kept-image rule).
    boot_configure: bool = False


class GpuClusterAws(pulumi.ComponentResource):
    """A GPU cluster on AWS: network, security, placement, launch templates, nodes, FSx, outputs."""

    stack_outputs: dict[str, Any]

    def __init__(
        self, name: str, args: GpuClusterAwsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        spec = args.spec
        if spec.provider.kind != "aws":
            raise SpecError(f"GpuClusterAws needs provider 'aws', not '{spec.provider.kind}'")
        require_no_errors(spec)
        super().__init__(TYPE_TOKEN, name, None, opts)

        provider_spec = spec.provider
        catalog = load_catalog()
        cluster_tags = tags.aws_tags(spec, args.created_at, args.cluster_id)
        self.provider = aws.Provider(
            f"{name}-provider",
            region=provider_spec.region,
            default_tags=aws.ProviderDefaultTagsArgs(tags=cluster_tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)

        net = network.build_network(name, provider_spec, child)
        fs_spec = spec.filesystem if isinstance(spec.filesystem, FsxLustreFilesystem) else None
        groups = security.build_security_groups(
            name, spec, net.vpc_id, fs_spec is not None, child, fsx_efa=fs_spec is not None and fs_spec.efa
        )
        # Nodes of a baked image configure themselves at boot from their facts (docs/boot-configure.md).
        boot = args.baked is not None and args.boot_configure
        profile = (
            iam.build_instance_profile(name, provider_spec.region, child, ssm=provider_spec.ssm)
            if provider_spec.ssm or boot
            else None
        )
        self.munge_secret = (
            munge_secret.build_munge_secret(name, spec.name, args.cluster_id, profile.role, child)
            if boot and profile is not None
            else None
        )
        placement = None
        if capacity.needs_placement_group(spec):
            placement = capacity.build_placement_group(name, child)
        baked = args.baked
        images = Images(
            provider_spec.ami,
            pulumi.InvokeOptions(parent=self, provider=self.provider),
            baked_id=baked.id if baked is not None else None,
        )
        templates: list[aws.ec2.LaunchTemplate] = []

        # The filesystem before the nodes: their facts name its mount.
        filesystem: dict[str, Any] = {"kind": "none"}
        self.filesystem: aws.fsx.LustreFileSystem | None = None
        if fs_spec is not None and groups.fsx is not None:
            self.filesystem = fsx.build_fsx(name, fs_spec, net.subnet_id, groups.fsx.id, child)
            filesystem = {
                "kind": fs_spec.kind,
                "mount_point": fs_spec.mount_point,
                "deployment_type": fs_spec.deployment_type,
                "size_gib": fs_spec.size_gib,
                "dns_name": self.filesystem.dns_name,
                "mount_name": self.filesystem.mount_name,
            }

        hosts: list[dict[str, Any]] = []
        self.instances: dict[str, aws.ec2.Instance] = {}
        self.fleets: dict[str, aws.ec2.Fleet] = {}
        expires_at = tags.expires_at_text(spec, args.created_at)
        invoke = pulumi.InvokeOptions(parent=self, provider=self.provider)
        controller = spec.host_names(spec.controller_group)[0]
        controller_ip: pulumi.Output[str] | None = None
        facts = (
            _Facts(
                spec,
                catalog,
                controller,
                filesystem,
                baked,
                self.munge_secret.arn,
                munge_secret.endpoint(provider_spec.region),
            )
            if boot and baked is not None and self.munge_secret is not None
            else None
        )
        # The controller's group first: the other nodes' facts name its address.
        ordered = [spec.controller_group] + [g for g in spec.node_groups if g is not spec.controller_group]
        for group in ordered:
            item = catalog.get(group.instance_type)
            slots = interfaces.group_layout(spec, group, item)
            fleet_group = launched_by_fleet(group)
            efa = sum(1 for slot in slots if slot.is_efa)
            image_key = _image_key(spec, item)

            template = build_launch_template(
                name,
                group,
                image=images.for_type(item),
                slots=slots,
                subnet_id=net.subnet_id,
                security_group_ids=[groups.nodes.id]
                + ([groups.login.id] if groups.login is not None and group in spec.login_groups else []),
                instance_profile_arn=profile.arn if profile is not None else None,
                placement_group=capacity.placement_group_of(group, placement),
                tags=cluster_tags,
                opts=child,
                fleet_user_data=(
                    user_data(spec, None, args.ssh_keys, _of(facts, group, None, controller_ip))
                    if fleet_group
                    else None
                ),
                metadata_tags=boot and fleet_group,
            )
            templates.append(template)
            version = template.latest_version.apply(str)
            addresses: dict[str, pulumi.Output[str]] = {}
            if fleet_group:
                launched = build_fleet(
                    name, group, template=template, version=version, subnet_id=net.subnet_id, opts=child
                )
                self.fleets[group.name] = launched
                for fleet_host in fleet_hosts(
                    launched,
                    spec.host_names(group),
                    expires_at=expires_at,
                    opts=child,
                    invoke=invoke,
                    region=provider_spec.region,
                    name_tags=boot,
                ):
                    addresses[fleet_host.name] = fleet_host.private_ip
            else:
                for host in spec.host_names(group):
                    data = user_data(spec, host, args.ssh_keys, _of(facts, group, host, controller_ip))
                    instance = self._instance(host, template, version, data, group, child)
                    self.instances[host] = instance
                    addresses[host] = instance.private_ip
            if controller in addresses:
                controller_ip = addresses[controller]
            for host, private_ip in addresses.items():
                hosts.append(
                    outputs.host_record(
                        name=host,
                        roles=list(group.roles),
                        private_ip=private_ip,
                        instance_type=group.instance_type,
                        item=item,
                        fabric_interfaces=efa,
                        image=image_key,
                    )
                )

        self.stack_outputs = {
            "cluster": spec.name,
            "cluster_id": args.cluster_id,
            "provider": "aws",
            "region": provider_spec.region,
            "zone": provider_spec.zone,
            "fabric": spec.fabric.kind.value,
            "expires_at": expires_at,
            "head_node": spec.host_names(spec.controller_group)[0],
            "hosts": hosts,
            "filesystem": filesystem,
            "baked_image_hash": _baked_hash(baked, templates),
            "boot_configure": boot,
        }
        self.register_outputs(self.stack_outputs)

    @staticmethod
    def _instance(
        host: str,
        template: aws.ec2.LaunchTemplate,
        version: pulumi.Output[str],
        user_data: pulumi.Input[str],
        group: NodeGroup,
        opts: pulumi.ResourceOptions,
    ) -> aws.ec2.Instance:
        return aws.ec2.Instance(
            host,
            launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=template.id, version=version),
            user_data=user_data,
            tags={"Name": host, "gpufleet:group": group.name},
            opts=opts,
        )


def _image_key(spec: ClusterSpec, item: InstanceType | None) -> str | None:
    """The manifest key (catalog/images.yaml) of the image a group of ``item`` boots."""
    provider = spec.provider
    assert isinstance(provider, AwsProvider)
    return load_image_manifests().for_family(
        family_for(provider.ami, item), item.cpu_arch if item else "x86_64"
    )


def _of(
    facts: _Facts | None, group: NodeGroup, host: str | None, controller_ip: pulumi.Output[str] | None
) -> pulumi.Output[str] | None:
    """The facts of ``host`` (None: a fleet's nodes, one user data for all), when nodes have facts."""
    if facts is None:
        return None
    return facts.of(group, host or facts.spec.host_names(group)[0], host is not None, controller_ip)


@dataclass(frozen=True)
class _Facts:
    """The facts of the nodes of a cluster that configure themselves (``userdata.node_facts_output``)."""

    spec: ClusterSpec
    catalog: Catalog
    controller: str
    filesystem: dict[str, Any]
    baked: CloudImage
    secret_arn: pulumi.Output[str]
    endpoint: str  # the secret's Secrets Manager endpoint (munge_secret.endpoint): the node calls it

    def record(self, group: NodeGroup, host: str) -> dict[str, Any]:
        item = self.catalog.get(group.instance_type)
        slots = interfaces.group_layout(self.spec, group, item)
        return outputs.host_record(
            name=host,
            roles=list(group.roles),
            private_ip="0.0.0.0",  # the node reads its own address at boot
            instance_type=group.instance_type,
            item=item,
            fabric_interfaces=sum(1 for slot in slots if slot.is_efa),
            image=_image_key(self.spec, item),
        )

    def of(
        self, group: NodeGroup, host: str, named: bool, controller_ip: pulumi.Output[str] | None
    ) -> pulumi.Output[str]:
        record = self.record(group, host)
        is_controller = host == self.controller
        peers = {g.name: self.record(g, self.spec.host_names(g)[0]) for g in self.spec.compute_groups}
        region = self.spec.provider.region if isinstance(self.spec.provider, AwsProvider) else None
        return node_facts_output(
            self.spec,
            record,
            group=group.name,
            controller=self.controller,
            controller_ip=None if is_controller else controller_ip,
            filesystem=self.filesystem,
            image_hash=self.baked.digest,
            secret_arn=self.secret_arn,
            region=region,
            endpoint=self.endpoint,
            named=named,
            set_hostname=True,  # as AwsBackend.inventory_from_outputs sets it
            peers=peers,
        )


def _baked_hash(
    baked: CloudImage | None, templates: list[aws.ec2.LaunchTemplate]
) -> pulumi.Output[str | None] | None:
    """The baked image's hash while every template holds it (see the module doc), else None."""
    if baked is None or not templates:
        return None
    return pulumi.Output.all(*[template.image_id for template in templates]).apply(
        lambda ids: baked.digest if all(image_id == baked.id for image_id in ids) else None
    )
