"""GpuClusterGcp under Pulumi mocks: the resources every GCP machine type of the catalog gets.

Every assertion names the resource's URN in its message.
"""

from __future__ import annotations

import importlib
import inspect
import ipaddress
import re
from functools import cache

import pytest
from gcp_testlib import CREATED_AT, Recording, gcp_gpu_types, gcp_spec

from gpufleet.catalog import InstanceType
from gpufleet.catalog.gcp import HOST_MTU, series_of
from gpufleet.errors import SpecError
from gpufleet.infra.gcp import TYPE_TOKEN
from gpufleet.infra.gcp.mocks import PUBLIC_IMAGES
from gpufleet.infra.gcp.network import IAP_RANGE
from gpufleet.infra.outputs import OUTPUT_KEYS
from gpufleet.infra.tags import PLAN_CLUSTER_ID, gcp_labels
from gpufleet.inventory.stack import from_stack_outputs

INSTANCE = "gcp:compute/instance:Instance"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"

GPU_TYPES = gcp_gpu_types()


def _ids(items: list[InstanceType]) -> list[str]:
    return [item.name for item in items]


def subnet_of(rec: Recording, link: str):
    return rec.by_output(SUBNET, "selfLink", link)


def network_of(rec: Recording, subnet) -> object:
    return rec.by_output(NETWORK, "id", subnet.inputs["network"])


def compute_vms(rec: Recording):
    vms = [r for r in rec.of_type(INSTANCE) if "-gpu-" in r.name]
    assert vms, f"no compute VM among {[r.urn for r in rec.of_type(INSTANCE)]}"
    return vms


@pytest.mark.parametrize("item", GPU_TYPES, ids=_ids(GPU_TYPES))
def test_nics_vpcs_and_mtu_follow_the_catalog(record, item: InstanceType):
    rec = record(gcp_spec(item.name))
    assert rec.error is None, rec.error
    fabric = item.fabric
    host_nics = fabric.host_nics or 1
    for vm in compute_vms(rec):
        nics = vm.inputs["networkInterfaces"]
        assert len(nics) == host_nics + fabric.interfaces, (
            f"{vm.urn}: {len(nics)} NICs, catalog says {host_nics} host + {fabric.interfaces} GPU"
        )
        types = [nic["nicType"] for nic in nics]
        expected = ["GVNIC"] * host_nics + [fabric.gpu_nic_type] * fabric.interfaces
        assert types == expected, f"{vm.urn}: nic types {types}, expected {expected}"
        subnets = [subnet_of(rec, nic["subnetwork"]) for nic in nics]
        networks = [network_of(rec, subnet) for subnet in subnets]
        assert len({s.name for s in subnets}) == len(nics), f"{vm.urn}: two NICs share a subnet"
        host_networks = networks[:host_nics]
        assert len({n.name for n in host_networks}) == host_nics, f"{vm.urn}: host NICs share a VPC"
        for network in host_networks:
            assert network.inputs["mtu"] == HOST_MTU, f"{network.urn}: host VPC MTU {network.inputs['mtu']}"
            assert "networkProfile" not in network.inputs, f"{network.urn}: a host VPC has a profile"
        gpu_networks = networks[host_nics:]
        if fabric.network_profile == "roce":
            names = {n.name for n in gpu_networks}
            assert len(names) == 1, f"{vm.urn}: RoCE NICs should share one VPC, got {sorted(names)}"
            roce = gpu_networks[0]
            profile = roce.inputs.get("networkProfile", "")
            assert profile == "projects/test-project-1/global/networkProfiles/us-central1-a-vpc-roce", (
                f"{roce.urn}: network profile {profile!r}"
            )
            assert roce.inputs["mtu"] == fabric.mtu, f"{roce.urn}: MTU {roce.inputs['mtu']} != {fabric.mtu}"
        else:
            names = [n.name for n in gpu_networks]
            assert len(set(names)) == fabric.interfaces, f"{vm.urn}: GPU NICs not one VPC each: {names}"
            for network in gpu_networks:
                assert network.inputs["mtu"] == fabric.mtu, (
                    f"{network.urn}: MTU {network.inputs['mtu']}, catalog says {fabric.mtu}"
                )
                assert "networkProfile" not in network.inputs, f"{network.urn}: unexpected profile"
    expected_vpcs = host_nics + (1 if fabric.network_profile == "roce" else fabric.interfaces)
    assert len(rec.of_type(NETWORK)) == expected_vpcs, [r.urn for r in rec.of_type(NETWORK)]


@pytest.mark.parametrize("item", GPU_TYPES, ids=_ids(GPU_TYPES))
def test_compute_vms_are_private_placed_and_terminate_on_maintenance(record, item: InstanceType):
    rec = record(gcp_spec(item.name))
    policies = rec.of_type(POLICY)
    assert len(policies) == 1, f"expected one placement policy, got {[p.urn for p in policies]}"
    policy = policies[0]
    placement = policy.inputs["groupPlacementPolicy"]
    assert placement["collocation"] == "COLLOCATED", f"{policy.urn}: {placement}"
    series = series_of(item.name)
    if series.max_distance:
        # The tightest distance that holds the group's 2 VMs (issue 10, GCP 4: was always the largest).
        assert placement.get("maxDistance") == min(series.max_distance), f"{policy.urn}: {placement}"
    else:
        assert "maxDistance" not in placement, f"{policy.urn}: {item.name} takes no max distance"
    link = f"https://www.googleapis.com/compute/v1/projects/test-project-1/regions/us-central1/resourcePolicies/{policy.inputs['name']}"
    for vm in compute_vms(rec):
        assert vm.inputs.get("resourcePolicies") == link, f"{vm.urn}: placement policy not attached"
        assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE", (
            f"{vm.urn}: {vm.inputs['scheduling']}"
        )
        assert "guestAccelerators" not in vm.inputs, f"{vm.urn}: {item.name} carries its GPUs"
        assert vm.inputs["machineType"] == item.name, f"{vm.urn}"
    for vm in rec.of_type(INSTANCE):
        for nic in vm.inputs["networkInterfaces"]:
            assert not nic.get("accessConfigs"), f"{vm.urn}: a NIC has an external IP: {nic}"


@cache
def _accepts_labels(type_: str) -> bool:
    """Whether the pulumi-gcp resource class of a type token takes ``labels`` (read from the SDK)."""
    _, path, cls_name = type_.split(":")
    package, module = path.split("/")
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", module).lower()
    cls = getattr(importlib.import_module(f"pulumi_gcp.{package}.{snake}"), cls_name)
    return "labels" in inspect.signature(cls._internal_init).parameters


@pytest.mark.parametrize(
    "spec",
    [gcp_spec(item.name) for item in GPU_TYPES]
    + [
        gcp_spec(filesystem={"kind": "managed_lustre", "size_gib": 18000}),
        gcp_spec(filesystem={"kind": "filestore", "tier": "ZONAL", "size_gib": 10240}),
    ],
    ids=[*_ids(GPU_TYPES), "managed-lustre", "filestore"],
)
def test_labels_on_every_labelable_resource(record, spec):
    rec = record(spec)
    assert rec.error is None, rec.error
    labels = gcp_labels(spec, CREATED_AT, PLAN_CLUSTER_ID)
    assert labels["gpufleet-cluster-id"] == PLAN_CLUSTER_ID
    marker = f"gpufleet-cluster={spec.name}"
    for resource in rec.resources:
        if resource.type.startswith("gpufleet:"):
            continue
        if _accepts_labels(resource.type):
            assert resource.inputs.get("labels") == labels, (
                f"{resource.urn}: labels {resource.inputs.get('labels')}"
            )
        elif "description" in resource.inputs:
            assert resource.inputs["description"].startswith(marker), f"{resource.urn}: no cluster marker"
    for vm in rec.of_type(INSTANCE):
        disk = vm.inputs["bootDisk"]["initializeParams"]
        assert disk.get("labels") == labels, f"{vm.urn}: boot disk labels {disk.get('labels')}"


@pytest.mark.parametrize("item", GPU_TYPES, ids=_ids(GPU_TYPES))
def test_outputs_have_the_common_shape(record, item: InstanceType):
    spec = gcp_spec(item.name)
    rec = record(spec)
    outputs = rec.outputs
    assert tuple(outputs) == OUTPUT_KEYS, f"outputs keys {tuple(outputs)}"
    assert outputs["provider"] == "gcp" and outputs["head_node"] == "t1-head", outputs
    inventory = from_stack_outputs(outputs)
    assert [h.name for h in inventory.hosts] == ["t1-head", "t1-gpu-0", "t1-gpu-1"]
    host_range = ipaddress.IPv4Network("10.0.0.0/19")
    for host in inventory.hosts:
        assert ipaddress.IPv4Address(host.private_ip) in host_range, f"{host.name}: {host.private_ip}"
        wanted = item.fabric.interfaces if host.gpus else 0
        assert host.fabric_interfaces == wanted, f"{host.name}: fabric_interfaces {host.fabric_interfaces}"
    assert outputs["filesystem"] == {"kind": "none"}
    components = rec.of_type(TYPE_TOKEN)
    assert len(components) == 1 and components[0].name == "t1", [c.urn for c in components]


def test_firewalls_allow_internal_traffic_and_ssh_from_iap_only(record):
    spec = gcp_spec("a3-megagpu-8g", access={"allowed_cidrs": ["203.0.113.0/24"]})
    rec = record(spec)
    subnet_ranges = {s.inputs["network"]: set() for s in rec.of_type(SUBNET)}
    for subnet in rec.of_type(SUBNET):
        subnet_ranges[subnet.inputs["network"]].add(subnet.inputs["ipCidrRange"])
    for rule in rec.of_type(FIREWALL):
        sources = set(rule.inputs["sourceRanges"])
        assert "0.0.0.0/0" not in sources, f"{rule.urn}: open to the internet"
        if rule.name.endswith("-internal"):
            assert sources == subnet_ranges[rule.inputs["network"]], f"{rule.urn}: {sources}"
    iap = rec.named("t1-ssh-iap")
    assert iap.inputs["sourceRanges"] == [IAP_RANGE], f"{iap.urn}: {iap.inputs['sourceRanges']}"
    # No node has an external IP, so no rule lets SSH in from access.allowed_cidrs (it could never be
    # reached; GCP audit (12)): those CIDRs reach the image builder only.
    opened = [r.urn for r in rec.of_type(FIREWALL) if "203.0.113.0/24" in r.inputs["sourceRanges"]]
    assert opened == [], f"unreachable SSH rules: {opened}"
    for instance in rec.of_type("gcp:compute/instance:Instance"):
        for nic in instance.inputs["networkInterfaces"]:
            assert not nic.get("accessConfigs"), f"{instance.urn}: an external IP"
    head = rec.named("t1-head")
    assert "t1-login" in head.inputs["tags"], f"{head.urn}: {head.inputs['tags']}"
    assert len(head.inputs["networkInterfaces"]) == 1, f"{head.urn}: a head node has a single gVNIC"
    nat = rec.named("t1-nat")
    router = rec.named("t1-router")
    assert router.inputs["network"] == "projects/test-project-1/global/networks/t1-host", f"{router.urn}"
    assert nat.inputs["router"] == "t1-router", f"{nat.urn}"


def test_roce_vpc_gets_no_vpc_firewall_rule(record):
    rec = record(gcp_spec("a3-ultragpu-8g"))
    roce = rec.named("t1-roce")
    roce_id = "projects/test-project-1/global/networks/t1-roce"
    rules = [r.urn for r in rec.of_type(FIREWALL) if r.inputs["network"] == roce_id]
    assert not rules, f"{roce.urn}: RoCE VPCs take no VPC firewall rules, got {rules}"
    subnets = [s for s in rec.of_type(SUBNET) if s.inputs["network"] == roce_id]
    assert len(subnets) == 8, f"{roce.urn}: {len(subnets)} subnets"


def test_managed_lustre_with_private_services_access(record):
    spec = gcp_spec(filesystem={"kind": "managed_lustre", "size_gib": 36000, "throughput_per_tib": 1000})
    rec = record(spec)
    lustre = rec.of_type("gcp:lustre/instance:Instance")[0]
    inputs = lustre.inputs
    assert inputs["capacityGib"] == "36000" and inputs["perUnitStorageThroughput"] == "1000", f"{lustre.urn}"
    assert inputs["network"] == "projects/test-project-1/global/networks/t1-host", f"{lustre.urn}"
    assert inputs["location"] == "us-central1-a" and inputs["filesystem"] == "lustre", f"{lustre.urn}"
    address = rec.of_type("gcp:compute/globalAddress:GlobalAddress")[0]
    assert address.inputs["purpose"] == "VPC_PEERING", f"{address.urn}"
    connection = rec.of_type("gcp:servicenetworking/connection:Connection")[0]
    assert connection.inputs["reservedPeeringRanges"] == [address.inputs["name"]], f"{connection.urn}"
    lnet = rec.named("t1-lnet")
    assert lnet.inputs["allows"] == [{"protocol": "tcp", "ports": ["988"]}], f"{lnet.urn}"
    fs = rec.outputs["filesystem"]
    assert re.fullmatch(r"10\.252\.\d+\.\d+@tcp:/lustre", fs["mount_source"]), fs
    assert fs["kind"] == "managed_lustre" and fs["mount_point"] == "/lustre", fs


def test_filestore_output_is_a_mount_source(record):
    spec = gcp_spec(filesystem={"kind": "filestore", "tier": "REGIONAL", "size_gib": 12800})
    rec = record(spec)
    store = rec.of_type("gcp:filestore/instance:Instance")[0]
    assert store.inputs["location"] == "us-central1", f"{store.urn}: REGIONAL lives in the region"
    assert store.inputs["fileShares"] == {"name": "shared", "capacityGb": 12800}, f"{store.urn}"
    assert rec.outputs["filesystem"]["mount_source"] == "10.253.0.2:/shared", rec.outputs["filesystem"]


def test_spot_and_reservation_groups(record):
    groups = [
        {"name": "head", "roles": ["controller"], "instance_type": "n2-standard-8"},
        {
            "name": "spot",
            "roles": ["compute"],
            "instance_type": "a3-megagpu-8g",
            "capacity": {"mode": "spot"},
        },
        {
            "name": "res",
            "roles": ["compute"],
            "instance_type": "a3-megagpu-8g",
            "count": 2,
            "capacity": {"mode": "reservation", "reservation": "my-res"},
        },
    ]
    rec = record(gcp_spec(node_groups=groups))
    assert rec.error is None, rec.error
    spot = rec.named("t1-spot-0")
    scheduling = spot.inputs["scheduling"]
    assert scheduling["provisioningModel"] == "SPOT" and scheduling["instanceTerminationAction"] == "STOP", (
        f"{spot.urn}: {scheduling}"
    )
    assert scheduling["automaticRestart"] is False and scheduling["preemptible"] is True, f"{spot.urn}"
    assert spot.inputs.get("resourcePolicies"), f"{spot.urn}: a Spot group keeps its placement policy"
    for name in ("t1-res-0", "t1-res-1"):
        vm = rec.named(name)
        affinity = vm.inputs["reservationAffinity"]
        assert affinity == {
            "type": "SPECIFIC_RESERVATION",
            "specificReservation": {"key": "compute.googleapis.com/reservation-name", "values": ["my-res"]},
        }, f"{vm.urn}: {affinity}"
        assert "resourcePolicies" not in vm.inputs, f"{vm.urn}: the reservation decides placement"
    assert [p.name for p in rec.of_type(POLICY)] == ["t1-spot-placement"]


def test_ethernet_fabric_gets_host_nics_only(record):
    rec = record(gcp_spec("a3-megagpu-8g", fabric="ethernet"))
    for vm in compute_vms(rec):
        assert len(vm.inputs["networkInterfaces"]) == 1, f"{vm.urn}: fabric ethernet asks for no GPU NICs"
    assert [n.name for n in rec.of_type(NETWORK)] == ["t1-host"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"filesystem": {"kind": "managed_lustre", "size_gib": 20000}}, "steps of 18000 GiB"),
        ({"fabric": {"kind": "tcpxo", "interfaces": 4}}, "takes 8 GPU NICs"),
        (
            {
                "node_groups": [
                    {"name": "head", "roles": ["controller"], "instance_type": "n2-standard-8"},
                    {"name": "gpu", "roles": ["compute"], "instance_type": "a3-megagpu-8g", "count": 1501},
                ]
            },
            "at most 1500",
        ),
    ],
    ids=["lustre-step", "nic-count", "placement-limit"],
)
def test_invalid_specs_fail_before_any_resource_is_registered(record, changes, message):
    rec = record(gcp_spec(**changes), raises=True)
    assert isinstance(rec.error, SpecError), f"expected SpecError, got {rec.error!r}"
    assert message in str(rec.error), str(rec.error)
    assert rec.resources == [], f"registered before failing: {[r.urn for r in rec.resources]}"


def test_every_vm_gets_the_cluster_key_through_cloud_init(record):
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnly gpufleet@test"
    rec = record(gcp_spec(access={"ssh_public_key": key}))
    for vm in rec.of_type(INSTANCE):
        user_data = vm.inputs["metadata"]["user-data"]
        assert user_data.startswith("#cloud-config\n"), f"{vm.urn}: {user_data[:40]!r}"
        assert key in user_data and f"hostname: {vm.inputs['name']}" in user_data, f"{vm.urn}: {user_data}"


@pytest.mark.parametrize(
    ("machine_type", "family"),
    [
        # Cluster Toolkit's a3mega/a3ultra/a4high Slurm blueprints build on this family (issue 10, GCP 5:
        # was the 570 family of Ubuntu 22.04, and plain Ubuntu for A3 Mega).
        ("a3-megagpu-8g", "ubuntu-accelerator-2404-amd64-with-nvidia-580"),
        ("a3-ultragpu-8g", "ubuntu-accelerator-2404-amd64-with-nvidia-580"),
        ("a4-highgpu-8g", "ubuntu-accelerator-2404-amd64-with-nvidia-580"),
        # The toolkit's A3 High blueprint builds on plain Ubuntu 22.04 (and adds the TCPX kernel).
        ("a3-highgpu-8g", "ubuntu-2204-lts"),
    ],
)
def test_gpu_vms_boot_the_image_family_cluster_toolkit_builds_on(record, machine_type, family):
    # The mocks answer each family with its publisher's image (PUBLIC_IMAGES): the image names the family.
    (wanted,) = [image for _, listed, image in PUBLIC_IMAGES if listed == family]
    rec = record(gcp_spec(machine_type))
    for vm in compute_vms(rec):
        image = vm.inputs["bootDisk"]["initializeParams"]["image"]
        assert image.endswith(f"/images/{wanted}"), f"{vm.urn}: boots {image}, not {family}'s {wanted}"


@pytest.mark.parametrize("item", GPU_TYPES, ids=_ids(GPU_TYPES))
def test_gpu_facts_and_stack_mode_follow_catalog_and_image(record, item: InstanceType):
    """Google's accelerator images carry the driver: GPU hosts booted from one are verified, not installed."""
    inventory = from_stack_outputs(record(gcp_spec(item.name)).outputs)
    accelerator_image = series_of(item.name).image_project == "ubuntu-os-accelerator-images"
    assert item.gpu is not None
    for host in inventory.compute:
        want = (item.gpu.arch, item.gpu.nvswitch, "verify" if accelerator_image else "install")
        assert (host.gpu_arch, host.nvswitch, host.gpu_stack) == want, host
    assert (inventory.controller.gpu_arch, inventory.controller.gpu_stack) == (None, "none")


def test_a_fixed_accelerator_image_means_verify(record):
    family = "ubuntu-accelerator-2404-amd64-with-nvidia-580"
    image = f"projects/ubuntu-os-accelerator-images/global/images/family/{family}"
    provider = {"kind": "gcp", "project": "test-project-1", "region": "us-central1", "zone": "us-central1-a"}
    inventory = from_stack_outputs(record(gcp_spec(provider={**provider, "image": image})).outputs)
    assert {h.gpu_stack for h in inventory.compute} == {"verify"}


@pytest.mark.parametrize("machine_type", ["a3-megagpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g"])
def test_accelerator_image_verifies_the_driver_and_installs_cuda_nccl_dcgm(record, machine_type):
    """Google's accelerator image carries the driver (and fabric manager) only: Cluster Toolkit installs
    CUDA, DCGM and NCCL on top, and gpufleet does the same; persistence mode is turned on."""
    inventory = from_stack_outputs(record(gcp_spec(machine_type)).outputs)
    for host in inventory.compute:
        modes = host.gpu_components
        picked = {
            c: modes[c] for c in ("driver", "fabric_manager", "cuda", "nccl", "dcgm", "persistence_mode")
        }
        assert picked == {
            "driver": "verify",
            "fabric_manager": "verify",
            "cuda": "install",
            "nccl": "install",
            "dcgm": "install",
            "persistence_mode": "install",
        }, (host.name, modes)
        assert host.gpu_paths == {}, host
    assert inventory.controller.gpu_components == {}
