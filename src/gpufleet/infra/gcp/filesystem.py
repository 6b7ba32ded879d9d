"""The cluster's shared filesystem on GCP, in the host VPC, and the output record nodes mount it from.

Managed Lustre (``filesystem.kind: managed_lustre``) creates:
- ``<name>-lustre-range``: a global internal address range for private services access (VPC_PEERING);
- ``<name>-psa``: the private services access connection (peering with servicenetworking), deleted with
  ``REMOVE_PEERING`` (see ``PSA_DELETION_POLICY``) so that ``pulumi destroy`` can delete the VPC after it;
- ``<name>-lnet``: a firewall rule letting the Lustre servers reach the nodes on TCP 988 (LNet);
- ``<name>-lustre``: the Managed Lustre instance in the cluster's zone.

Filestore (``filesystem.kind: filestore``) creates:
- ``<name>-nfs``: the Filestore instance, on the host VPC by direct peering with a fixed reserved range;
- ``<name>-nfs``: a firewall rule letting that range reach the nodes' NFS lock ports.

Parallelstore is being retired by Google and is not offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.infra.gcp.network import ClusterNetwork, ingress_rule
from gpufleet.spec.model import ClusterSpec, FilestoreFilesystem, GcpProvider, ManagedLustreFilesystem

LUSTRE_RANGE = ("10.252.0.0", 20)
# Filestore's reserved range: a /29 for the basic tiers, a /26 for zonal and regional.
FILESTORE_RANGE = {"basic": "10.253.0.0/29", "other": "10.253.0.0/26"}
# NFS: portmapper, the lock and status daemons (Filestore's file locking calls back to the client).
_NFS_PORTS = ["111", "2046", "2049", "2050", "4045"]

# Deleting a private services access connection fails while the producer (Managed Lustre here) still
# holds resources behind it, which it may do for a while after the instance is gone; the connection's VPC
# peering then stays and blocks deleting the VPC. REMOVE_PEERING deletes the connection and, when the API
# refuses, removes the peering from the network so the VPC can go (ABANDON would leave the peering).
# pulumi-gcp 10.2 documents it (servicenetworking.Connection.deletion_policy); upstream:
# https://github.com/GoogleCloudPlatform/magic-modules/pull/18476 and pulumi/pulumi-gcp#3354.
# update_on_creation_fail re-uses the shadow peering a previous cluster of the same VPC name left, as
# Cluster Toolkit's private-service-access module does (GoogleCloudPlatform/cluster-toolkit#4744).
PSA_DELETION_POLICY = "REMOVE_PEERING"


@dataclass
class ClusterFilesystem:
    output: dict[str, Any]
    resources: list[pulumi.Resource]


def build_filesystem(
    parent: pulumi.Resource,
    name: str,
    spec: ClusterSpec,
    network: ClusterNetwork,
    labels: dict[str, str],
    marker: str,
) -> ClusterFilesystem:
    fs = spec.filesystem
    if isinstance(fs, ManagedLustreFilesystem):
        return _lustre(parent, name, spec, fs, network, labels, marker)
    if isinstance(fs, FilestoreFilesystem):
        return _filestore(parent, name, spec, fs, network, labels, marker)
    return ClusterFilesystem({"kind": "none"}, [])


def _lustre(
    parent: pulumi.Resource,
    name: str,
    spec: ClusterSpec,
    fs: ManagedLustreFilesystem,
    network: ClusterNetwork,
    labels: dict[str, str],
    marker: str,
) -> ClusterFilesystem:
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    project, zone = provider.project, provider.zone
    opts = pulumi.ResourceOptions(parent=parent)
    host = network.host_vpc.network
    address, prefix = LUSTRE_RANGE
    peering_range = gcp.compute.GlobalAddress(
        f"{name}-lustre-range",
        name=f"{name}-lustre-range",
        project=project,
        network=host.id,
        purpose="VPC_PEERING",
        address_type="INTERNAL",
        address=address,
        prefix_length=prefix,
        labels=labels,
        description=f"{marker}: private services access range for Managed Lustre",
        opts=opts,
    )
    connection = gcp.servicenetworking.Connection(
        f"{name}-psa",
        network=host.id,
        service="servicenetworking.googleapis.com",
        reserved_peering_ranges=[peering_range.name],
        deletion_policy=PSA_DELETION_POLICY,
        update_on_creation_fail=True,
        opts=opts,
    )
    firewall = ingress_rule(
        parent,
        f"{name}-lnet",
        project,
        host,
        [f"{address}/{prefix}"],
        [("tcp", ["988"])],
        f"{marker}: Managed Lustre servers to the nodes (LNet, TCP 988)",
    )
    instance = gcp.lustre.Instance(
        f"{name}-lustre",
        instance_id=f"{name}-lustre",
        project=project,
        location=zone,
        network=host.id,
        capacity_gib=str(fs.size_gib),
        per_unit_storage_throughput=str(fs.throughput_per_tib),
        filesystem=fs.filesystem_name,
        labels=labels,
        description=f"{marker}: shared filesystem",
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[connection]),
    )
    output = {
        "kind": "managed_lustre",
        "mount_point": fs.mount_point,
        "mount_source": instance.mount_point,  # e.g. 10.252.0.5@tcp:/lustre
        "filesystem_name": fs.filesystem_name,
        "capacity_gib": fs.size_gib,
        "throughput_per_tib": fs.throughput_per_tib,
    }
    return ClusterFilesystem(output, [peering_range, connection, firewall, instance])


def _filestore(
    parent: pulumi.Resource,
    name: str,
    spec: ClusterSpec,
    fs: FilestoreFilesystem,
    network: ClusterNetwork,
    labels: dict[str, str],
    marker: str,
) -> ClusterFilesystem:
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    project, region, zone = provider.project, provider.region, provider.zone
    opts = pulumi.ResourceOptions(parent=parent)
    host = network.host_vpc.network
    reserved = FILESTORE_RANGE["basic" if fs.tier.startswith("BASIC") else "other"]
    instance = gcp.filestore.Instance(
        f"{name}-nfs",
        name=f"{name}-nfs",
        project=project,
        location=region if fs.tier == "REGIONAL" else zone,
        tier=fs.tier,
        file_shares=gcp.filestore.InstanceFileSharesArgs(name=fs.share_name, capacity_gb=fs.size_gib),
        networks=[
            gcp.filestore.InstanceNetworkArgs(
                network=host.name,
                modes=["MODE_IPV4"],
                connect_mode="DIRECT_PEERING",
                reserved_ip_range=reserved,
            )
        ],
        labels=labels,
        description=f"{marker}: shared filesystem",
        opts=opts,
    )
    firewall = ingress_rule(
        parent,
        f"{name}-nfs",
        project,
        host,
        [reserved],
        [("tcp", _NFS_PORTS), ("udp", _NFS_PORTS)],
        f"{marker}: Filestore to the nodes (NFS locking)",
    )
    address = instance.networks.apply(_first_address)
    output = {
        "kind": "filestore",
        "mount_point": fs.mount_point,
        "mount_source": pulumi.Output.concat(address, ":/", fs.share_name),
        "tier": fs.tier,
        "capacity_gib": fs.size_gib,
    }
    return ClusterFilesystem(output, [instance, firewall])


def _first_address(networks: Sequence[gcp.filestore.outputs.InstanceNetwork]) -> str:
    """The Filestore instance's address: its first network's first IP (Google sets it when it makes one)."""
    addresses = networks[0].ip_addresses
    assert addresses, "a Filestore instance's network has its IP address once the instance is made"
    return addresses[0]
