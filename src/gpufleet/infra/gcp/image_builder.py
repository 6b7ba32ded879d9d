"""``ImageBuilderGcp``: the short-lived stack that bakes a GCP image of the roles (``gpufleet image build``).

Type token ``gpufleet:gcp:ImageBuilder``. Children (named after the builder, ``bake-<hash>``; the ones
that take labels carry the builder's cluster labels, ``gpufleet-cluster=bake-<hash>`` and an expiry a
few hours out, the others that marker in their description, as the cluster's resources do):
- ``<name>-net`` and ``<name>-subnet``: a VPC network with one subnet in the spec's region;
- ``<name>-ssh``: a firewall rule letting SSH (22) in from ``access.allowed_cidrs`` to the builder's
  network tag, and from nowhere else (egress is open on GCP by default, for packages);
- ``<name>-builder``: one VM from the base image (the GPU groups' family, or ``provider.image``) with an
  ephemeral external address (no Cloud NAT for a VM that lives minutes), the GPU group's boot disk size
  (the disk type its own series takes), the cluster key in its cloud-config; with the image step its
  ``desired_status`` is TERMINATED (Compute Engine makes an image of an attached disk only from a
  stopped VM, unless forced);
- with the request's ``source`` (the builder's boot disk self-link, recorded from the first update as a plain
  string): ``<name>-image``, a ``gcp.compute.Image`` of that disk with the guest OS features GPU VMs
  need (``GUEST_OS_FEATURES``), labelled by ``tags.gcp_image_labels``, kept on delete.

GCP has no IMDSv2: its metadata server always requires the ``Metadata-Flavor: Google`` header. Disks are
encrypted at rest by default with Google-managed keys. Outputs: ``instance_id``, ``public_ip``,
``private_ip``, ``boot_disk`` and ``image_id`` (None before the image step).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.catalog.gcp import VM_SCOPES, series_of
from gpufleet.infra import tags
from gpufleet.infra.gcp.compute import Images
from gpufleet.infra.images import BakeRequest
from gpufleet.infra.userdata import render_user_data
from gpufleet.spec.model import GcpProvider

TYPE_TOKEN = "gpufleet:gcp:ImageBuilder"
# gVNIC: the NIC of A3 and later GPU VMs; UEFI and multi-queue SCSI as Ubuntu's own images declare.
# https://cloud.google.com/compute/docs/images/create-delete-deprecate-private-images#guest-os-features
GUEST_OS_FEATURES = ("GVNIC", "UEFI_COMPATIBLE", "VIRTIO_SCSI_MULTIQUEUE")
BUILDER_CIDR = "10.250.0.0/24"


class ImageBuilderGcp(pulumi.ComponentResource):
    stack_outputs: dict[str, Any]

    def __init__(self, name: str, args: BakeRequest, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        spec = args.spec
        provider = spec.provider
        assert isinstance(provider, GcpProvider)
        labels = tags.gcp_labels(spec, args.created_at)
        marker = f"{tags.GCP_CLUSTER_LABEL}={spec.name}"
        child = pulumi.ResourceOptions(parent=self)
        network = gcp.compute.Network(
            f"{name}-net",
            name=f"{name}-net",
            project=provider.project,
            auto_create_subnetworks=False,
            description=f"{marker}: image builder network",
            opts=child,
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            name=f"{name}-subnet",
            project=provider.project,
            region=provider.region,
            network=network.id,
            ip_cidr_range=BUILDER_CIDR,
            description=f"{marker}: image builder subnet",
            opts=child,
        )
        gcp.compute.Firewall(
            f"{name}-ssh",
            name=f"{name}-ssh",
            project=provider.project,
            network=network.id,
            direction="INGRESS",
            source_ranges=[str(cidr) for cidr in spec.access.allowed_cidrs],
            target_tags=[f"{name}-builder"],
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
            description=f"{marker}: SSH to the image builder from access.allowed_cidrs",
            opts=child,
        )
        # The builder's own disk type: a CPU builder may not take the GPU series' (Hyperdisk on A3 Ultra).
        series = series_of(args.instance_type)
        self.builder = gcp.compute.Instance(
            f"{name}-builder",
            name=f"{name}-builder",
            project=provider.project,
            zone=provider.zone,
            machine_type=args.instance_type,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                auto_delete=True,
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=Images(self, spec).for_type(args.group.instance_type),
                    size=args.group.root_volume_gib,
                    type=series.boot_disk_type,
                    labels=dict(labels),
                ),
            ),
            network_interfaces=[
                gcp.compute.InstanceNetworkInterfaceArgs(
                    subnetwork=subnet.self_link,
                    nic_type="GVNIC",
                    access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()],
                )
            ],
            scheduling=gcp.compute.InstanceSchedulingArgs(
                on_host_maintenance="TERMINATE", automatic_restart=True
            ),
            service_account=gcp.compute.InstanceServiceAccountArgs(scopes=list(VM_SCOPES)),
            labels=dict(labels),
            metadata={"user-data": render_user_data(f"{name}-builder", list(args.ssh_keys))},
            tags=[f"{name}-builder"],
            desired_status="TERMINATED" if args.source is not None else "RUNNING",
            allow_stopping_for_update=True,
            deletion_protection=False,
            opts=child,
        )
        self.image: gcp.compute.Image | None = None
        if args.source is not None:
            self.image = gcp.compute.Image(
                f"{name}-image",
                name=f"gpufleet-baked-{args.digest[:12]}-{args.created_at.strftime('%Y%m%d%H%M')}",
                project=provider.project,
                family="gpufleet-baked",
                description=f"gpufleet baked image {args.digest} from {args.base}",
                source_disk=args.source,
                guest_os_features=[gcp.compute.ImageGuestOsFeatureArgs(type=f) for f in GUEST_OS_FEATURES],
                labels=tags.gcp_image_labels(spec, args.digest, args.base, args.created_at),
                # After the builder stopped: the disk of a running VM makes no image without forcing.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.builder], retain_on_delete=True),
            )
        nic = self.builder.network_interfaces.apply(lambda nics: nics[0])
        self.stack_outputs = {
            "instance_id": self.builder.instance_id,
            "public_ip": nic.apply(lambda n: n.access_configs[0].nat_ip if n.access_configs else None),
            "private_ip": nic.apply(lambda n: n.network_ip),
            "boot_disk": self.builder.boot_disk.apply(lambda disk: disk.source),
            "image_id": self.image.name if self.image is not None else None,
        }
        self.register_outputs(self.stack_outputs)
