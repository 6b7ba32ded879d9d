"""GpuClusterAzure under Pulumi mocks: the resources every Azure GPU size of the catalog gets.

Every assertion names the resource's URN in its message.
"""

from __future__ import annotations

import base64
import ipaddress

import pytest
import yaml
from azure_testlib import CREATED_AT, SUBSCRIPTION, azure_gpu_types, azure_spec

from gpufleet.catalog import InstanceType, load_catalog
from gpufleet.catalog.azure import HPC_2204
from gpufleet.infra.azure import TYPE_TOKEN
from gpufleet.infra.azure.network import BASTION_SUBNET, layout
from gpufleet.infra.outputs import OUTPUT_KEYS
from gpufleet.infra.tags import azure_tags
from gpufleet.inventory.stack import from_stack_outputs

RG = "azure-native:resources:ResourceGroup"
VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"
NIC = "azure-native:network:NetworkInterface"
SUBNET = "azure-native:network:Subnet"
NSG = "azure-native:network:NetworkSecurityGroup"
PIP = "azure-native:network:PublicIPAddress"
NAT = "azure-native:network:NatGateway"
BASTION = "azure-native:network:BastionHost"
AMLFS = "azure-native:storagecache:AmlFilesystem"
UNTAGGED = {SUBNET, TYPE_TOKEN}  # subnets take no tags in ARM; the component is Pulumi's own

GPU_TYPES = azure_gpu_types()
LUSTRE = {
    "kind": "azure_lustre",
    "sku": "AMLFS-Durable-Premium-250",
    "size_tib": 16,
    "data_repository": {
        "storage_account_id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/data/providers/"
        "Microsoft.Storage/storageAccounts/ckpts",
        "container": "checkpoints",
    },
}


@pytest.mark.parametrize("item", GPU_TYPES, ids=[item.name for item in GPU_TYPES])
def test_every_gpu_size_gets_a_scale_set_per_infiniband_domain_and_private_vms(record, item: InstanceType):
    spec = azure_spec(item.name)
    rec = record(spec)
    assert rec.error is None, rec.error
    (scale_set,) = rec.of_type(VMSS)
    inputs = scale_set.inputs
    assert inputs["orchestrationMode"] == "Flexible", scale_set.urn
    assert inputs["platformFaultDomainCount"] == 1 and inputs["singlePlacementGroup"] is True, scale_set.urn
    assert "virtualMachineProfile" not in inputs, f"{scale_set.urn}: its VMs are made one by one"
    scale_set_id = rec.computed[scale_set.urn]["id"]
    group = spec.compute_groups[0]
    vms = {vm.name: vm for vm in rec.of_type(VM)}
    for host in spec.host_names(group):
        vm = vms[host]
        assert vm.inputs["virtualMachineScaleSet"] == {"id": scale_set_id}, f"{vm.urn}: not in the IB domain"
        assert vm.inputs["hardwareProfile"] == {"vmSize": item.name}, vm.urn
    head = vms[spec.host_names(spec.controller_group)[0]]
    assert "virtualMachineScaleSet" not in head.inputs, f"{head.urn}: the head is in no InfiniBand domain"
    for nic in rec.of_type(NIC):
        for configuration in nic.inputs["ipConfigurations"]:
            assert "publicIPAddress" not in configuration, f"{nic.urn}: a node with a public IP"
        assert nic.inputs["enableAcceleratedNetworking"] is True, nic.urn
    hosts = {host["name"]: host for host in rec.outputs["hosts"]}
    for host in spec.host_names(group):
        assert hosts[host]["fabric_interfaces"] == item.fabric.interfaces, hosts[host]
        assert hosts[host]["gpus"] == item.gpu_count, hosts[host]


def test_only_nat_and_bastion_have_public_ips_and_egress_goes_through_the_nat(record):
    rec = record(azure_spec(filesystem=LUSTRE))
    ips = {pip.name for pip in rec.of_type(PIP)}
    assert ips == {"t1-nat-ip", "t1-bastion-ip"}, ips
    for pip in rec.of_type(PIP):
        assert pip.inputs["sku"]["name"] == "Standard", pip.urn
    (nat,) = rec.of_type(NAT)
    nat_id = rec.computed[nat.urn]["id"]
    assert [ref["id"] for ref in nat.inputs["publicIpAddresses"]] == [
        rec.computed[rec.named("t1-nat-ip").urn]["id"]
    ]
    subnets = {subnet.inputs["subnetName"]: subnet for subnet in rec.of_type(SUBNET)}
    for name in ("t1-nodes", "t1-lustre"):
        subnet = subnets[name]
        assert subnet.inputs["natGateway"] == {"id": nat_id}, f"{subnet.urn}: no NAT for egress"
        assert subnet.inputs["defaultOutboundAccess"] is False, subnet.urn
    bastion_subnet = subnets[BASTION_SUBNET]
    assert "natGateway" not in bastion_subnet.inputs and "networkSecurityGroup" not in bastion_subnet.inputs
    (bastion,) = rec.of_type(BASTION)
    assert bastion.inputs["sku"] == {"name": "Standard"}, bastion.urn
    assert bastion.inputs["enableTunneling"] and bastion.inputs["enableIpConnect"], bastion.urn
    vms = rec.of_type(VM)
    for vm in vms:
        assert vm.urn not in [rec.named(n).urn for n in ("t1-nat-ip", "t1-bastion-ip")]


def test_the_nsg_opens_no_ingress_from_outside_the_network(record):
    spec = azure_spec()
    rec = record(spec)
    (nsg,) = rec.of_type(NSG)
    cut = layout(spec.provider.address_space)
    outside = {"*", "Internet", "0.0.0.0/0", "Any"}
    for rule in nsg.inputs["securityRules"]:
        if rule["direction"] != "Inbound" or rule["access"] != "Allow":
            continue
        source = rule["sourceAddressPrefix"]
        assert source not in outside, f"{nsg.urn}: rule {rule['name']} lets {source} in"
        assert ipaddress.IPv4Network(source).subnet_of(spec.provider.address_space), rule
    allowed = [r for r in nsg.inputs["securityRules"] if r["access"] == "Allow"]
    assert [(r["sourceAddressPrefix"], r["destinationPortRange"]) for r in allowed] == [(cut.bastion, "22")]
    denied = [r for r in nsg.inputs["securityRules"] if r["access"] == "Deny"]
    assert [r["sourceAddressPrefix"] for r in denied] == ["Internet"], nsg.urn
    nsg_id = rec.computed[nsg.urn]["id"]
    nodes = next(s for s in rec.of_type(SUBNET) if s.inputs["subnetName"] == "t1-nodes")
    assert nodes.inputs["networkSecurityGroup"] == {"id": nsg_id}, nodes.urn


def test_every_resource_is_tagged_for_the_cluster_and_its_expiry(record):
    spec = azure_spec(filesystem=LUSTRE)
    rec = record(spec)
    wanted = azure_tags(spec, CREATED_AT)
    assert wanted["gpufleet:expires-at"] == "2026-11-28T09:30:00Z"
    for resource in rec.resources:
        if resource.type in UNTAGGED:
            continue
        tags = resource.inputs.get("tags") or {}
        assert {key: tags.get(key) for key in wanted} == wanted, f"{resource.urn}: tags {tags}"
    (group,) = rec.of_type(RG)
    assert group.inputs["resourceGroupName"] == "gpufleet-t1", group.urn


def test_nodes_boot_the_hpc_image_and_the_head_plain_ubuntu_of_its_release(record):
    rec = record(azure_spec())
    vms = {vm.name: vm for vm in rec.of_type(VM)}
    publisher, offer, sku, version = HPC_2204.split(":")
    assert vms["t1-gpu-0"].inputs["storageProfile"]["imageReference"] == {
        "publisher": publisher,
        "offer": offer,
        "sku": sku,
        "version": version,
    }
    head = vms["t1-head"].inputs["storageProfile"]["imageReference"]
    assert head["publisher"] == "Canonical" and "22_04" in head["sku"], head
    hosts = {host["name"]: host for host in rec.outputs["hosts"]}
    modes = hosts["t1-gpu-0"]["gpu_components"]
    assert (
        modes["driver"] == "verify" and modes["doca_ofed"] == "verify" and modes["nvidia_peermem"] == "verify"
    )
    assert modes["imex"] == "install", modes
    assert hosts["t1-head"]["gpu_stack"] == "none", hosts["t1-head"]


def test_a_vm_gets_its_host_name_keys_and_cloud_config_in_custom_data(record):
    rec = record(azure_spec(), ssh_keys=("ssh-ed25519 AAAAC3Nzaexample cluster",))
    for vm in rec.of_type(VM):
        profile = vm.inputs["osProfile"]
        assert profile["computerName"] == vm.name, vm.urn
        assert profile["linuxConfiguration"]["disablePasswordAuthentication"] is True, vm.urn
        keys = profile["linuxConfiguration"]["ssh"]["publicKeys"]
        assert [k["keyData"] for k in keys] == ["ssh-ed25519 AAAAC3Nzaexample cluster"], vm.urn
        config = yaml.safe_load(
            base64.b64decode(profile["customData"]).decode().removeprefix("#cloud-config\n")
        )
        assert config["hostname"] == vm.name and config["disable_root"] is True, (vm.urn, config)
        disk = vm.inputs["storageProfile"]["osDisk"]
        assert (
            disk["managedDisk"] == {"storageAccountType": "Premium_LRS"} and disk["deleteOption"] == "Delete"
        )


def test_managed_lustre_gets_its_subnet_container_and_mount_source(record):
    spec = azure_spec(
        filesystem=LUSTRE, provider={**azure_spec().provider.model_dump(mode="json"), "zone": "2"}
    )
    rec = record(spec)
    assert rec.error is None, rec.error
    (fs,) = rec.of_type(AMLFS)
    subnet = rec.by_id(fs.inputs["filesystemSubnet"])
    assert ipaddress.IPv4Network(subnet.inputs["addressPrefix"]).prefixlen == 24, subnet.urn
    assert fs.inputs["zones"] == ["2"] and fs.inputs["storageCapacityTiB"] == 16, fs.urn
    settings = fs.inputs["hsm"]["settings"]
    account = LUSTRE["data_repository"]["storage_account_id"]
    assert settings == {
        "container": f"{account}/blobServices/default/containers/checkpoints",
        "loggingContainer": f"{account}/blobServices/default/containers/lustre-logs",
        "importPrefix": "/",  # the SDK's default: the file system starts with the container's files
    }, fs.urn
    output = rec.outputs["filesystem"]
    mgs = rec.computed[fs.urn]["clientInfo"]["mgsAddress"]
    assert output["mount_source"] == f"{mgs}@tcp:/lustrefs", output
    assert ipaddress.IPv4Address(mgs) in ipaddress.IPv4Network(subnet.inputs["addressPrefix"])


def test_outputs_have_the_contract_keys_and_make_the_inventory_aws_and_gcp_make(record):
    spec = azure_spec(filesystem=LUSTRE)
    rec = record(spec)
    assert set(rec.outputs) == set(OUTPUT_KEYS), rec.outputs.keys()
    assert rec.outputs["provider"] == "azure" and rec.outputs["region"] == "eastus", rec.outputs
    hosts = [{**host, "address": host["private_ip"]} for host in rec.outputs["hosts"]]
    inventory = from_stack_outputs({**rec.outputs, "hosts": hosts})
    nodes = ipaddress.IPv4Network(layout(spec.provider.address_space).nodes)
    addresses = [ipaddress.IPv4Address(host.private_ip) for host in inventory.hosts]
    assert all(address in nodes for address in addresses), addresses
    assert sorted(int(a) - int(nodes.network_address) for a in addresses) == [4, 5, 6], "Azure keeps .0-.3"
    item = load_catalog().get("Standard_ND96isr_H100_v5")
    assert item is not None
    compute = [host for host in inventory.hosts if host.gpus]
    assert {host.fabric_port_gbps for host in compute} == {400}, compute


def test_gb200_needs_its_image_and_a_group_of_the_nvlink_domain(record):
    spec = azure_spec("Standard_ND128isr_NDR_GB200_v6")
    rec = record(spec)
    assert rec.error is None, rec.error
    assert len([vm for vm in rec.of_type(VM) if "-gpu-" in vm.name]) == 18
    no_image = azure_spec(
        "Standard_ND128isr_NDR_GB200_v6",
        provider={"kind": "azure", "subscription": SUBSCRIPTION, "location": "eastus"},
    )
    failed = record(no_image, raises=True)
    assert failed.error is not None and "provider.image" in str(failed.error), failed.error
    assert not failed.of_type(VM), "nothing is registered for a spec preflight refuses"
