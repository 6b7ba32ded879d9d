"""``GpuClusterGcp``: a whole gpufleet cluster on Google Cloud, from a spec, as one Pulumi component.

Creates, all as children of the component (type ``gpufleet:gcp:GpuCluster``):
- the VPC networks, firewall rules and Cloud NAT of ``network.py``;
- the shared filesystem of ``filesystem.py`` (Managed Lustre or Filestore), if the spec asks for one;
- the compact placement policies and VMs of ``compute.py``.
Before registering anything it runs the preflight checks for GCP (and the common ones), and raises
``SpecError`` listing every error. ``stack_outputs`` holds the outputs in ``gpufleet.infra.outputs``' shape.

With ``args.baked`` (the image ``gpufleet image build`` made from the spec's roles and pins), every VM
boots it; ``baked_image_hash`` is its hash while every VM's boot disk was made from it (a VM keeps the
image of its first ``pulumi up``, ``compute.KEPT_BOOT_IMAGE``, so VMs made before the bake stay as they
are and the hash stays null: ``configure`` then runs the install phase on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pulumi

from gpufleet.catalog import InstanceType, load_catalog
from gpufleet.catalog.gcp import nic_layout
from gpufleet.errors import SpecError
from gpufleet.infra.gcp.compute import Images, image_manifest, instance, placement_policy
from gpufleet.infra.gcp.filesystem import build_filesystem
from gpufleet.infra.gcp.network import build_network
from gpufleet.infra.images import CloudImage
from gpufleet.infra.outputs import host_record
from gpufleet.infra.tags import GCP_CLUSTER_LABEL, PLAN_CLUSTER_ID, expires_at_text, gcp_labels
from gpufleet.infra.userdata import node_facts_output, user_data
from gpufleet.inventory.node_facts import METADATA_KEY
from gpufleet.preflight import require_no_errors
from gpufleet.spec.model import ClusterSpec, NodeGroup

if TYPE_CHECKING:
    import pulumi_gcp as gcp

TYPE_TOKEN = "gpufleet:gcp:GpuCluster"


@dataclass(frozen=True)
class GpuClusterGcpArgs:
    spec: ClusterSpec
    created_at: datetime
    # Public keys authorized on every node besides the spec's (gpufleet up adds the cluster's own key;
    # stacks/ the stack's key, an Output when pulumi-tls makes it).
    ssh_keys: tuple[pulumi.Input[str], ...] = ()
    # The baked image of the spec's current roles and pins, when one exists (gpufleet up looks it up).
    baked: CloudImage | None = None
    # The cluster's id (gpufleet.state.new_cluster_id: made at the first up, kept in the state and the
    # stack), labelled on every resource that takes labels; the offline plan's where none exists yet.
    cluster_id: str = PLAN_CLUSTER_ID
    # With ``baked``: each node's facts (gpufleet.inventory.node_facts) in its metadata, under
    # ``METADATA_KEY``. GCP nodes do not read the munge key at boot yet (no Secret Manager read: the facts
    # say ``push``), so their unit skips itself and configure pushes as before (docs/boot-configure.md).
    boot_configure: bool = False


class GpuClusterGcp(pulumi.ComponentResource):
    stack_outputs: dict[str, Any]

    def __init__(
        self, name: str, args: GpuClusterGcpArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        spec = args.spec
        if spec.provider.kind != "gcp":
            raise SpecError(f"GpuClusterGcp needs provider 'gcp', not '{spec.provider.kind}'")
        require_no_errors(spec)
        super().__init__(TYPE_TOKEN, name, None, opts)
        catalog = load_catalog()
        provider = spec.provider
        labels = gcp_labels(spec, args.created_at, args.cluster_id)
        # Resources that take no labels carry this in their description, which the leftovers check reads.
        marker = f"{GCP_CLUSTER_LABEL}={spec.name}"

        layouts = {g.name: nic_layout(spec, g, catalog.get(g.instance_type)) for g in spec.node_groups}
        network = build_network(self, name, spec, list(layouts.values()), marker)
        filesystem = build_filesystem(self, name, spec, network, labels, marker)
        baked = args.baked
        baked_path = f"projects/{provider.project}/global/images/{baked.id}" if baked else None
        images = Images(self, spec, baked=baked_path)

        hosts: list[dict[str, Any]] = []
        self.instances: dict[str, gcp.compute.Instance] = {}
        controller = spec.host_names(spec.controller_group)[0]
        controller_ip: pulumi.Output[str] | None = None
        # The controller's group first: the other nodes' facts name its address.
        ordered = [spec.controller_group] + [g for g in spec.node_groups if g is not spec.controller_group]
        for group in ordered:
            item = catalog.get(group.instance_type)
            policy = placement_policy(self, name, spec, group, marker)
            layout = layouts[group.name]
            for hostname in spec.host_names(group):
                vm = instance(
                    self,
                    hostname=hostname,
                    spec=spec,
                    group=group,
                    item=item,
                    layout=layout,
                    network=network,
                    image=images.for_type(group.instance_type),
                    policy=policy,
                    labels=labels,
                    # Ubuntu's cloud-init reads the same cloud-config as on AWS from the user-data key.
                    metadata={
                        "user-data": user_data(spec, hostname, args.ssh_keys),
                        **self._facts(
                            args, group, item, hostname, controller, controller_ip, filesystem.output
                        ),
                    },
                    depends_on=[network.nat],
                    keep_image=provider.image is None,
                )
                self.instances[hostname] = vm
                if hostname == controller:
                    controller_ip = vm.network_interfaces.apply(lambda nics: str(nics[0].network_ip))
                hosts.append(
                    host_record(
                        name=hostname,
                        roles=group.roles,
                        private_ip=vm.network_interfaces.apply(lambda nics: nics[0].network_ip),
                        instance_type=group.instance_type,
                        item=item,
                        fabric_interfaces=layout.gpu_nics,
                        image=image_manifest(spec, group.instance_type),
                    )
                )

        self.network = network
        self.filesystem = filesystem
        self.stack_outputs = {
            "cluster": spec.name,
            "cluster_id": args.cluster_id,
            "provider": "gcp",
            "region": provider.region,
            "zone": provider.zone,
            "fabric": spec.fabric.kind.value,
            "expires_at": expires_at_text(spec, args.created_at),
            "head_node": spec.host_names(spec.controller_group)[0],
            "hosts": hosts,
            "filesystem": filesystem.output,
            "baked_image_hash": _baked_hash(baked, baked_path, list(self.instances.values())),
            # Its nodes do not configure themselves yet: no read of the munge key at boot
            # (docs/boot-configure.md).
            "boot_configure": False,
        }
        self.register_outputs(self.stack_outputs)

    @staticmethod
    def _facts(
        args: GpuClusterGcpArgs,
        group: NodeGroup,
        item: InstanceType | None,
        hostname: str,
        controller: str,
        controller_ip: pulumi.Output[str] | None,
        filesystem: dict[str, Any],
    ) -> dict[str, pulumi.Output[str]]:
        """The node's facts as its metadata key ``METADATA_KEY`` (with a baked image), else nothing."""
        if not args.boot_configure or args.baked is None:
            return {}
        spec = args.spec

        def record(group: NodeGroup, name: str) -> dict[str, Any]:
            item = load_catalog().get(group.instance_type)
            return host_record(
                name=name,
                roles=group.roles,
                private_ip="0.0.0.0",  # the node reads its own address at boot
                instance_type=group.instance_type,
                item=item,
                fabric_interfaces=nic_layout(spec, group, item).gpu_nics,
                image=image_manifest(spec, group.instance_type),
            )

        peers = {g.name: record(g, spec.host_names(g)[0]) for g in spec.compute_groups}
        facts = node_facts_output(
            spec,
            record(group, hostname),
            group=group.name,
            controller=controller,
            controller_ip=None if hostname == controller else controller_ip,
            filesystem=filesystem,
            image_hash=args.baked.digest,
            secret_arn=None,  # no Secret Manager read yet: the munge key comes by push
            named=True,
            peers=peers,
        )
        return {METADATA_KEY: facts}


def _baked_hash(
    baked: CloudImage | None, path: str | None, vms: list[gcp.compute.Instance]
) -> pulumi.Output[str | None] | None:
    """The baked image's hash while every VM's boot disk was made from it (see the module doc)."""
    if baked is None or path is None or not vms:
        return None
    images = [vm.boot_disk.apply(_boot_image) for vm in vms]
    return pulumi.Output.all(*images).apply(
        lambda found: baked.digest if all(str(image).endswith(path) for image in found) else None
    )


def _boot_image(disk: gcp.compute.outputs.InstanceBootDisk) -> str | None:
    """The image a VM's boot disk was made from, as the engine reports it."""
    assert disk.initialize_params is not None, "a VM's boot disk is made from an image here"
    return disk.initialize_params.image
