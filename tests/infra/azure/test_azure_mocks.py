"""AzureMockCloud refuses what Azure Resource Manager refuses, so a program that would fail on ``pulumi up``
fails under the mocks too; and what it computes has ARM's shapes."""

from __future__ import annotations

import base64

import pytest
from azure_testlib import SUBSCRIPTION, azure_spec

from gpufleet.infra.azure.mocks import AzureMockCloud, AzureRefusal

RG = "gpufleet-t1"
NET = "azure-native:network"


def cloud_with_network() -> AzureMockCloud:
    cloud = AzureMockCloud(azure_spec())
    cloud.computed(
        f"{NET}:VirtualNetwork",
        "v",
        {
            "resourceGroupName": RG,
            "virtualNetworkName": "v",
            "addressSpace": {"addressPrefixes": ["10.40.0.0/16"]},
        },
        0,
    )
    return cloud


def subnet(cloud: AzureMockCloud, name: str, prefix: str) -> str:
    inputs = {"resourceGroupName": RG, "virtualNetworkName": "v", "subnetName": name, "addressPrefix": prefix}
    return cloud.computed(f"{NET}:Subnet", name, inputs, 0)["id"]


def pip(cloud: AzureMockCloud, name: str, sku: str) -> str:
    inputs = {"resourceGroupName": RG, "publicIpAddressName": name, "sku": {"name": sku}}
    return cloud.computed(f"{NET}:PublicIPAddress", name, inputs, 0)["id"]


def test_ids_are_arm_ids_and_nic_addresses_skip_the_four_azure_keeps():
    cloud = cloud_with_network()
    sid = subnet(cloud, "nodes", "10.40.0.0/24")
    network = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network"
    assert sid == f"{network}/virtualNetworks/v/subnets/nodes"
    nic = {
        "resourceGroupName": RG,
        "networkInterfaceName": "n",
        "ipConfigurations": [{"subnet": {"id": sid}}],
    }
    first = cloud.computed(f"{NET}:NetworkInterface", "n", nic, 0)
    second = cloud.computed(f"{NET}:NetworkInterface", "m", {**nic, "networkInterfaceName": "m"}, 0)
    assert [c["privateIPAddress"] for c in first["ipConfigurations"] + second["ipConfigurations"]] == [
        "10.40.0.4",
        "10.40.0.5",
    ]
    assert first["provisioningState"] == "Succeeded"


@pytest.mark.parametrize(
    ("name", "prefix", "code"),
    [
        ("outside", "10.99.0.0/24", "NetcfgInvalidSubnet"),
        ("AzureBastionSubnet", "10.40.9.0/27", "AzureBastionSubnetPrefixLengthInvalid"),
    ],
)
def test_subnets_azure_refuses(name, prefix, code):
    with pytest.raises(AzureRefusal) as refused:
        subnet(cloud_with_network(), name, prefix)
    assert refused.value.code == code


def test_overlapping_subnets_are_refused():
    cloud = cloud_with_network()
    subnet(cloud, "a", "10.40.0.0/22")
    with pytest.raises(AzureRefusal, match="NetcfgSubnetRangesOverlap"):
        subnet(cloud, "b", "10.40.1.0/24")


def test_bastion_needs_its_subnet_and_a_standard_ip_and_nothing_else_goes_there():
    cloud = cloud_with_network()
    nodes = subnet(cloud, "nodes", "10.40.0.0/24")
    bastion_subnet = subnet(cloud, "AzureBastionSubnet", "10.40.128.0/26")
    basic, standard = pip(cloud, "b", "Basic"), pip(cloud, "s", "Standard")

    def bastion(subnet_id: str, ip: str) -> dict:
        configuration = {"subnet": {"id": subnet_id}, "publicIPAddress": {"id": ip}}
        inputs = {"resourceGroupName": RG, "bastionHostName": "x", "ipConfigurations": [configuration]}
        return cloud.computed(f"{NET}:BastionHost", "x", inputs, 0)

    with pytest.raises(AzureRefusal, match="InvalidBastionSubnet"):
        bastion(nodes, standard)
    with pytest.raises(AzureRefusal, match="BastionRequiresStandardPublicIP"):
        bastion(bastion_subnet, basic)
    assert bastion(bastion_subnet, standard)["id"].endswith("/bastionHosts/x")
    nic = {"resourceGroupName": RG, "ipConfigurations": [{"subnet": {"id": bastion_subnet}}]}
    with pytest.raises(AzureRefusal, match="InUseSubnetCannotBeUsedForResource"):
        cloud.computed(f"{NET}:NetworkInterface", "n", nic, 0)


def test_a_nat_gateway_takes_standard_public_ips_only():
    cloud = cloud_with_network()
    basic = pip(cloud, "b", "Basic")
    with pytest.raises(AzureRefusal, match="NatGatewayCannotUseBasicPublicIP"):
        cloud.computed(
            f"{NET}:NatGateway", "nat", {"resourceGroupName": RG, "publicIpAddresses": [{"id": basic}]}, 0
        )


def vm(cloud: AzureMockCloud, name: str, **changes) -> dict:
    profile = {
        "computerName": name,
        "adminUsername": "ubuntu",
        "customData": base64.b64encode(b"#cloud-config\n").decode(),
        "linuxConfiguration": {
            "ssh": {"publicKeys": [{"path": "/home/ubuntu/.ssh/authorized_keys", "keyData": "k"}]}
        },
    }
    inputs = {"resourceGroupName": RG, "vmName": name, "osProfile": profile, **changes}
    return cloud.computed("azure-native:compute:VirtualMachine", name, inputs, 0)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"computerName": "x" * 65}, "longer than 64"),
        ({"adminUsername": "admin"}, "adminUsername 'admin'"),
        ({"customData": "#cloud-config not base64!"}, "customData is not base64"),
        (
            {"linuxConfiguration": {"ssh": {"publicKeys": [{"path": "/root/.ssh/authorized_keys"}]}}},
            "is not ubuntu's",
        ),
    ],
)
def test_linux_vm_profiles_azure_refuses(profile, message):
    cloud = cloud_with_network()
    base = vm(cloud, "ok")
    assert base["vmId"] and base["id"].endswith("/virtualMachines/ok")
    inputs = {
        "computerName": "vm",
        "adminUsername": "ubuntu",
        "linuxConfiguration": {"ssh": {"publicKeys": [{"path": "/home/ubuntu/.ssh/authorized_keys"}]}},
        **profile,
    }
    with pytest.raises(AzureRefusal, match=message):
        cloud.computed(
            "azure-native:compute:VirtualMachine", "vm", {"resourceGroupName": RG, "osProfile": inputs}, 0
        )


@pytest.mark.parametrize(
    "urn",
    [
        "microsoft-dsvm:ubuntu-hpc:2204:latest",
        "Microsoft-DSVM:Ubuntu-HPC:2404:latest",
        "Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest",
        "Canonical:ubuntu-24_04-lts:server:latest",
    ],
)
def test_published_marketplace_images_boot(urn):
    publisher, offer, sku, version = urn.split(":")
    reference = {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
    assert vm(cloud_with_network(), "ok", storageProfile={"imageReference": reference})["vmId"]


@pytest.mark.parametrize(
    "urn",
    [
        "microsoft-dsvm:ubuntu-hpc:2004:latest",  # not an image gpufleet's sources list
        "Canonical:0001-com-ubuntu-server-jammy:22_04-lts:latest",  # 22.04's gen1 sku: the types need gen2
        "Canonical:ubuntu-24_04-lts:server-gen2:latest",  # 24.04's offer has no -gen2 sku
        "Canonical:0001-com-ubuntu-server-noble:24_04-lts-gen2:latest",  # 24.04 lives in ubuntu-24_04-lts
    ],
)
def test_a_marketplace_image_nobody_publishes_is_refused(urn):
    publisher, offer, sku, version = urn.split(":")
    reference = {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
    with pytest.raises(AzureRefusal, match="PlatformImageNotFound"):
        vm(cloud_with_network(), "bad", storageProfile={"imageReference": reference})


def test_scale_sets_refuse_what_flexible_orchestration_does():
    cloud = cloud_with_network()
    compute = "azure-native:compute:VirtualMachineScaleSet"
    with pytest.raises(AzureRefusal, match="PlatformFaultDomainCountRequired"):
        cloud.computed(compute, "s", {"resourceGroupName": RG, "orchestrationMode": "Flexible"}, 0)
    uniform = cloud.computed(compute, "u", {"resourceGroupName": RG, "orchestrationMode": "Uniform"}, 0)["id"]
    with pytest.raises(AzureRefusal, match="only a Flexible scale set"):
        vm(cloud, "in-uniform", virtualMachineScaleSet={"id": uniform})
    flex = cloud.computed(
        compute,
        "f",
        {
            "resourceGroupName": RG,
            "orchestrationMode": "Flexible",
            "platformFaultDomainCount": 1,
            "singlePlacementGroup": True,
        },
        0,
    )["id"]
    for index in range(100):
        vm(cloud, f"n{index}", virtualMachineScaleSet={"id": flex})
    with pytest.raises(AzureRefusal, match="single placement group holds 100 VMs"):
        vm(cloud, "n100", virtualMachineScaleSet={"id": flex})


def test_managed_lustre_refuses_a_small_subnet_and_an_off_step_size():
    cloud = cloud_with_network()
    small = subnet(cloud, "small", "10.40.0.0/25")
    big = subnet(cloud, "big", "10.40.1.0/24")
    fs = {"resourceGroupName": RG, "sku": {"name": "AMLFS-Durable-Premium-250"}, "storageCapacityTiB": 8.0}
    with pytest.raises(AzureRefusal, match="smaller than /24"):
        cloud.computed("azure-native:storagecache:AmlFilesystem", "l", {**fs, "filesystemSubnet": small}, 0)
    with pytest.raises(AzureRefusal, match="steps of 8 TiB"):
        cloud.computed(
            "azure-native:storagecache:AmlFilesystem",
            "l",
            {**fs, "filesystemSubnet": big, "storageCapacityTiB": 12.0},
            0,
        )
    made = cloud.computed("azure-native:storagecache:AmlFilesystem", "l", {**fs, "filesystemSubnet": big}, 0)
    assert made["clientInfo"]["mgsAddress"] == "10.40.1.4" and made["throughputProvisionedMBps"] == 2000


def test_the_program_fails_under_the_mocks_where_azure_would(record):
    """A group of 101 VMs with the limit raised in the spec (preflight trusts it) still meets Azure's default
    of 100 in the mocks: the 101st VM is refused, as ARM refuses it without the raise."""
    spec = azure_spec(
        provider={
            "kind": "azure",
            "subscription": SUBSCRIPTION,
            "location": "eastus",
            "ib_domain_max_vms": 200,
        },
        node_groups=[
            {"name": "head", "roles": ["controller"], "instance_type": "Standard_D8s_v5"},
            {"name": "gpu", "roles": ["compute"], "instance_type": "Standard_ND96isr_H100_v5", "count": 101},
        ],
    )
    rec = record(spec, raises=True)
    assert rec.error is not None and "single placement group holds 100 VMs" in str(rec.error), rec.error
