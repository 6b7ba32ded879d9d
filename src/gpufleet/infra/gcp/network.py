"""The cluster's VPC networks on GCP, laid out per machine type as Google documents it.

Creates (every name starts with the cluster's):
- ``<name>-host``: the host VPC (MTU 8896) and one subnet; nic0 of every node, Cloud NAT, Lustre;
- ``<name>-host1``: a second regular VPC and subnet when the type has two host gVNICs (A3 Ultra, A4);
- ``<name>-gpu-<i>``: one VPC and one subnet per GPU NIC (A3 High: 4, A3 Mega: 8), with the type's MTU
  (GPUDirect-TCPX / TCPXO);
- ``<name>-roce``: one VPC created with the zone's RoCE network profile (``<zone>-vpc-roce``) and one
  subnet per MRDMA NIC (A3 Ultra, A4: 8);
- firewall rules ``<name>-<vpc>-internal``: traffic from the VPC's own subnets only, on every regular
  VPC (a RoCE VPC takes no VPC firewall rules: its implied rules allow traffic between its MRDMA NICs,
  and nothing else can attach to it);
- ``<name>-ssh-iap``: SSH from Google's IAP range only. No node has an external IP (``compute.py``), so
  a rule letting SSH in from ``access.allowed_cidrs`` could never be reached (GCP audit 2026-11-23 #12,
  2026-11-24 (12)); those CIDRs open SSH to the image builder only (``image_builder.py``), and people
  reach the nodes through IAP;
- ``<name>-router`` and ``<name>-nat``: Cloud NAT on the host VPC (nodes have no external IP).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from gpufleet.catalog.gcp import HOST_MTU, NicLayout
from gpufleet.spec.model import ClusterSpec, GcpProvider

IAP_RANGE = "35.235.240.0/20"
LOGIN_TAG = "login"
_PREFIX = 19  # 8190 addresses per subnet: room for the 4096 nodes a group may have


def subnet_cidr(block: int) -> str:
    """``10.<block>.0.0/19``: host VPCs use blocks 0-1, GPU VPCs 10-17, RoCE subnets 20-27."""
    return str(ipaddress.IPv4Network(f"10.{block}.0.0/{_PREFIX}"))


@dataclass
class Vpc:
    role: str
    network: gcp.compute.Network
    subnets: list[gcp.compute.Subnetwork] = field(default_factory=list)
    cidrs: list[str] = field(default_factory=list)


@dataclass
class ClusterNetwork:
    """The VPCs of a cluster; ``interfaces`` wires one node's NICs into them."""

    host: list[Vpc]
    gpu: list[Vpc]
    roce: Vpc | None
    firewalls: list[gcp.compute.Firewall]
    router: gcp.compute.Router
    nat: gcp.compute.RouterNat

    @property
    def host_vpc(self) -> Vpc:
        return self.host[0]

    def interfaces(self, layout: NicLayout) -> list[gcp.compute.InstanceNetworkInterfaceArgs]:
        """nic0..: host gVNICs, then GPU NICs; never an access_config (no external IP)."""
        nics = [
            gcp.compute.InstanceNetworkInterfaceArgs(subnetwork=vpc.subnets[0].self_link, nic_type="GVNIC")
            for vpc in self.host[: layout.host_nics]
        ]
        if layout.roce and self.roce is not None:
            nics += [
                gcp.compute.InstanceNetworkInterfaceArgs(subnetwork=subnet.self_link, nic_type="MRDMA")
                for subnet in self.roce.subnets[: layout.gpu_nics]
            ]
        else:
            nics += [
                gcp.compute.InstanceNetworkInterfaceArgs(
                    subnetwork=vpc.subnets[0].self_link, nic_type=layout.gpu_nic_type or "GVNIC"
                )
                for vpc in self.gpu[: layout.gpu_nics]
            ]
        return nics


def build_network(
    parent: pulumi.Resource, name: str, spec: ClusterSpec, layouts: list[NicLayout], marker: str
) -> ClusterNetwork:
    """Create the VPCs every layout in ``layouts`` needs (the widest wins), with firewalls and NAT."""
    provider = spec.provider
    assert isinstance(provider, GcpProvider)
    project, region, zone = provider.project, provider.region, provider.zone
    opts = pulumi.ResourceOptions(parent=parent)

    def vpc(role: str, mtu: int, blocks: list[int], profile: str | None = None) -> Vpc:
        network = gcp.compute.Network(
            f"{name}-{role}",
            name=f"{name}-{role}",
            project=project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            mtu=mtu,
            network_profile=profile,
            description=f"{marker}: {role} VPC",
            opts=opts,
        )
        made = Vpc(role, network)
        for index, block in enumerate(blocks):
            suffix = f"-{index}" if len(blocks) > 1 else ""
            cidr = subnet_cidr(block)
            made.subnets.append(
                gcp.compute.Subnetwork(
                    f"{name}-{role}{suffix}",
                    name=f"{name}-{role}{suffix}",
                    project=project,
                    region=region,
                    network=network.id,
                    ip_cidr_range=cidr,
                    private_ip_google_access=None if profile else True,
                    description=f"{marker}: {role} subnet{suffix}",
                    opts=opts,
                )
            )
            made.cidrs.append(cidr)
        return made

    host_count = max(layout.host_nics for layout in layouts)
    host = [vpc("host" if i == 0 else f"host{i}", HOST_MTU, [i]) for i in range(host_count)]

    gpu: list[Vpc] = []
    roce: Vpc | None = None
    roce_layouts = [layout for layout in layouts if layout.roce]
    tcp_layouts = [layout for layout in layouts if layout.gpu_nics and not layout.roce]
    if tcp_layouts:
        widest = max(tcp_layouts, key=lambda layout: layout.gpu_nics)
        gpu = [vpc(f"gpu-{i}", widest.gpu_mtu or HOST_MTU, [10 + i]) for i in range(widest.gpu_nics)]
    if roce_layouts:
        widest = max(roce_layouts, key=lambda layout: layout.gpu_nics)
        roce = vpc(
            "roce",
            widest.gpu_mtu or HOST_MTU,
            [20 + i for i in range(widest.gpu_nics)],
            profile=f"projects/{project}/global/networkProfiles/{zone}-vpc-roce",
        )

    def rule(
        role: str,
        network: gcp.compute.Network,
        sources: list[str],
        allows: list[tuple[str, list[str] | None]],
        what: str,
        target_tags: list[str] | None = None,
    ) -> gcp.compute.Firewall:
        return ingress_rule(
            parent, f"{name}-{role}", project, network, sources, allows, f"{marker}: {what}", target_tags
        )

    everything: list[tuple[str, list[str] | None]] = [("tcp", None), ("udp", None), ("icmp", None)]
    firewalls = [
        rule(
            f"{item.role}-internal",
            item.network,
            list(item.cidrs),
            everything,
            f"traffic inside the {item.role} VPC only",
        )
        for item in [*host, *gpu]
    ]
    ssh: list[tuple[str, list[str] | None]] = [("tcp", ["22"])]
    firewalls.append(
        rule(
            "ssh-iap",
            host[0].network,
            [IAP_RANGE],
            ssh,
            "SSH through Identity-Aware Proxy TCP forwarding only",
        )
    )

    router = gcp.compute.Router(
        f"{name}-router",
        name=f"{name}-router",
        project=project,
        region=region,
        network=host[0].network.id,
        description=f"{marker}: Cloud NAT for package downloads",
        opts=opts,
    )
    nat = gcp.compute.RouterNat(
        f"{name}-nat",
        name=f"{name}-nat",
        project=project,
        region=region,
        router=router.name,
        nat_ip_allocate_option="AUTO_ONLY",
        source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
        opts=opts,
    )
    return ClusterNetwork(host=host, gpu=gpu, roce=roce, firewalls=firewalls, router=router, nat=nat)


def ingress_rule(
    parent: pulumi.Resource,
    name: str,
    project: str,
    network: gcp.compute.Network,
    sources: list[str],
    allows: list[tuple[str, list[str] | None]],
    description: str,
    target_tags: list[str] | None = None,
) -> gcp.compute.Firewall:
    """An ingress allow rule named ``name`` from ``sources``; ``allows`` is (protocol, ports or None)."""
    return gcp.compute.Firewall(
        name,
        name=name,
        project=project,
        network=network.id,
        direction="INGRESS",
        source_ranges=sources,
        target_tags=target_tags,
        allows=[gcp.compute.FirewallAllowArgs(protocol=protocol, ports=ports) for protocol, ports in allows],
        description=description,
        opts=pulumi.ResourceOptions(parent=parent),
    )
