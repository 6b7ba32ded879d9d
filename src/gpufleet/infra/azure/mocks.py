"""``AzureMockCloud``: what Azure would compute for the resources of ``GpuClusterAzure``, offline, and what it
would refuse.

Used by ``gpufleet plan`` and the tests (``gpufleet.infra.plan.run_offline``). It answers with the fields
Azure Resource Manager computes, in its own formats: ARM resource ids (``/subscriptions/<id>/resourceGroups/
<rg>/providers/<namespace>/<type>/<name>``), ``provisioningState: Succeeded``, a NIC's private IP taken in
order from its subnet from the fifth address on (Azure keeps the first four and the last address of every
subnet: "Azure reserves the first four and last IP address for a total of 5 IP addresses within each
subnet", virtual network FAQ, ``RESERVED_DOC``), a VM's ``vmId`` (a GUID), an AML file system's
``clientInfo`` (MGS address in its subnet, the mount command Azure prints) and HSM settings.

It refuses what Azure Resource Manager refuses for these resources where the provider schema or
Microsoft's documentation says so, raising ``AzureRefusal`` with Azure's error code, so that a program that
would fail on ``pulumi up`` fails under the mocks too:
- a subnet outside its virtual network's address space, or overlapping another (``NetcfgInvalidSubnet``,
  ``NetcfgSubnetRangesOverlap``);
- Azure Bastion outside a subnet named ``AzureBastionSubnet`` of at least /26, or with a Basic public IP;
  anything else in that subnet (Bastion's configuration settings);
- a NAT gateway with a public IP that is not Standard (NAT gateway: "Basic SKU public IP ... not compatible");
- a Flexible scale set without ``platformFaultDomainCount``; a VM attached to a scale set that is not
  Flexible; more VMs in a single-placement-group scale set than its 100 (``catalog.azure``);
- a Linux VM whose ``computerName`` is longer than 64 characters, whose SSH key path is not the admin
  user's ``authorized_keys``, whose ``customData`` is not base64, or whose admin user name is reserved;
- an AML file system in a subnet smaller than /24, or of a size its SKU does not come in;
- a VM booting a marketplace image its publisher does not list (``PlatformImageNotFound``; PUBLISHED).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import uuid
from collections.abc import Mapping
from typing import Any

from gpufleet.catalog.azure import IB_DOMAIN_DEFAULT_MAX, amlfs_size_problem
from gpufleet.infra.azure.network import BASTION_PREFIX, BASTION_SUBNET, LUSTRE_PREFIX
from gpufleet.spec.model import AzureProvider, ClusterSpec

RESERVED_DOC = "https://learn.microsoft.com/en-us/azure/virtual-network/virtual-networks-faq"
# Linux admin user names Azure refuses (OSProfile.adminUsername: "Disallowed values", abridged).
RESERVED_USERS = frozenset({"administrator", "admin", "root", "user", "guest", "test", "sys", "support"})
_FIRST_HOST = 4  # .0-.3 are Azure's


class AzureRefusal(Exception):
    """What Azure Resource Manager would answer with an error, as ``Code: message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class AzureMockCloud:
    def __init__(self, spec: ClusterSpec) -> None:
        provider = spec.provider
        assert isinstance(provider, AzureProvider)
        self.spec = spec
        self.subscription = provider.subscription
        self.location = provider.location
        self._vnets: dict[str, list[ipaddress.IPv4Network]] = {}  # vnet name -> address prefixes
        self._subnets: dict[str, tuple[str, ipaddress.IPv4Network]] = {}  # subnet id -> (name, range)
        self._next_host: dict[str, int] = {}
        self._public_ips: dict[str, str] = {}  # id -> SKU name
        self._scale_sets: dict[str, dict[str, Any]] = {}  # id -> inputs, with the VMs attached
        self._attached: dict[str, int] = {}

    # ---- ids ------------------------------------------------------------------------------------

    def _group_id(self, group: str) -> str:
        return f"/subscriptions/{self.subscription}/resourceGroups/{group}"

    def _id(self, inputs: Mapping[str, Any], namespace: str, kind: str, name: str) -> str:
        return f"{self._group_id(inputs['resourceGroupName'])}/providers/{namespace}/{kind}/{name}"

    # ---- resources ------------------------------------------------------------------------------

    def computed(self, type_: str, name: str, inputs: Mapping[str, Any], serial: int) -> dict[str, Any]:
        # "azure-native:network:VirtualNetwork" -> _network_VirtualNetwork
        _, module, kind = type_.split(":")
        handler = getattr(self, f"_{module}_{kind}", None)
        fields = handler(name, inputs) if handler else {}
        return {"provisioningState": "Succeeded", **fields}

    def _resources_ResourceGroup(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        group = inputs.get("resourceGroupName", name)
        if len(group) > 90:
            raise AzureRefusal("InvalidResourceGroup", f"resource group name '{group}' is longer than 90")
        return {"id": self._group_id(group), "name": group, "type": "Microsoft.Resources/resourceGroups"}

    def _network_VirtualNetwork(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        vnet = inputs.get("virtualNetworkName", name)
        prefixes = (inputs.get("addressSpace") or {}).get("addressPrefixes") or []
        self._vnets[vnet] = [ipaddress.IPv4Network(prefix) for prefix in prefixes]
        rid = self._id(inputs, "Microsoft.Network", "virtualNetworks", vnet)
        return {"id": rid, "name": vnet, "resourceGuid": str(uuid.uuid5(uuid.NAMESPACE_URL, rid))}

    def _network_Subnet(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        subnet, vnet = inputs.get("subnetName", name), inputs["virtualNetworkName"]
        cidr = ipaddress.IPv4Network(inputs["addressPrefix"])
        space = self._vnets.get(vnet, [])
        if not any(cidr.subnet_of(prefix) for prefix in space):
            raise AzureRefusal(
                "NetcfgInvalidSubnet", f"subnet {subnet} ({cidr}) is not in {vnet}'s address space {space}"
            )
        for other_name, other in self._subnets.values():
            if cidr.overlaps(other):
                raise AzureRefusal("NetcfgSubnetRangesOverlap", f"subnet {subnet} overlaps {other_name}")
        if subnet == BASTION_SUBNET and cidr.prefixlen > BASTION_PREFIX:
            raise AzureRefusal(
                "AzureBastionSubnetPrefixLengthInvalid",
                f"{BASTION_SUBNET} must be /{BASTION_PREFIX} or larger",
            )
        rid = f"{self._id(inputs, 'Microsoft.Network', 'virtualNetworks', vnet)}/subnets/{subnet}"
        self._subnets[rid] = (subnet, cidr)
        return {"id": rid, "name": subnet}

    def _network_NetworkSecurityGroup(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        nsg = inputs.get("networkSecurityGroupName", name)
        return {"id": self._id(inputs, "Microsoft.Network", "networkSecurityGroups", nsg), "name": nsg}

    def _network_PublicIPAddress(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        pip = inputs.get("publicIpAddressName", name)
        rid = self._id(inputs, "Microsoft.Network", "publicIPAddresses", pip)
        self._public_ips[rid] = str((inputs.get("sku") or {}).get("name", "Basic"))
        octet = 10 + len(self._public_ips)
        return {"id": rid, "name": pip, "ipAddress": f"20.0.113.{octet}"}

    def _network_NatGateway(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        for reference in inputs.get("publicIpAddresses") or []:
            if self._public_ips.get(reference.get("id", "")) != "Standard":
                raise AzureRefusal(
                    "NatGatewayCannotUseBasicPublicIP", "a NAT gateway takes Standard SKU public IPs only"
                )
        nat = inputs.get("natGatewayName", name)
        return {"id": self._id(inputs, "Microsoft.Network", "natGateways", nat), "name": nat}

    def _network_BastionHost(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        for configuration in inputs.get("ipConfigurations") or []:
            subnet_id = (configuration.get("subnet") or {}).get("id", "")
            if self._subnets.get(subnet_id, ("", None))[0] != BASTION_SUBNET:
                raise AzureRefusal(
                    "InvalidBastionSubnet", f"Azure Bastion needs a subnet named {BASTION_SUBNET}"
                )
            pip = (configuration.get("publicIPAddress") or {}).get("id", "")
            if self._public_ips.get(pip) != "Standard":
                raise AzureRefusal(
                    "BastionRequiresStandardPublicIP", "Azure Bastion takes a Standard public IP"
                )
        bastion = inputs.get("bastionHostName", name)
        return {
            "id": self._id(inputs, "Microsoft.Network", "bastionHosts", bastion),
            "name": bastion,
            "dnsName": f"bst-{uuid.uuid5(uuid.NAMESPACE_URL, bastion)}.bastion.azure.com",
        }

    def _network_NetworkInterface(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        nic = inputs.get("networkInterfaceName", name)
        configurations = []
        for configuration in inputs.get("ipConfigurations") or []:
            subnet_id = (configuration.get("subnet") or {}).get("id", "")
            subnet_name, cidr = self._subnets[subnet_id]
            if subnet_name == BASTION_SUBNET:
                raise AzureRefusal(
                    "InUseSubnetCannotBeUsedForResource", f"{BASTION_SUBNET} holds Bastion only"
                )
            offset = self._next_host.get(subnet_id, _FIRST_HOST)
            if offset >= cidr.num_addresses - 1:
                raise AzureRefusal("SubnetIsFull", f"subnet {subnet_name} has no free address")
            self._next_host[subnet_id] = offset + 1
            configurations.append(
                {
                    **configuration,
                    "privateIPAddress": str(cidr.network_address + offset),
                    "privateIPAddressVersion": "IPv4",
                    "provisioningState": "Succeeded",
                }
            )
        rid = self._id(inputs, "Microsoft.Network", "networkInterfaces", nic)
        return {"id": rid, "name": nic, "ipConfigurations": configurations, "macAddress": "00-0D-3A-00-00-01"}

    def _compute_VirtualMachineScaleSet(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        vmss = inputs.get("vmScaleSetName", name)
        if inputs.get("orchestrationMode") == "Flexible" and inputs.get("platformFaultDomainCount") is None:
            raise AzureRefusal(
                "PlatformFaultDomainCountRequired", "a Flexible scale set needs platformFaultDomainCount"
            )
        rid = self._id(inputs, "Microsoft.Compute", "virtualMachineScaleSets", vmss)
        self._scale_sets[rid] = dict(inputs)
        return {"id": rid, "name": vmss, "uniqueId": str(uuid.uuid5(uuid.NAMESPACE_URL, rid))}

    def _compute_VirtualMachine(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        vm = inputs.get("vmName", name)
        profile = inputs.get("osProfile") or {}
        computer = str(profile.get("computerName", vm))
        if len(computer) > 64:
            raise AzureRefusal("InvalidParameter", f"computerName '{computer}' is longer than 64 characters")
        user = str(profile.get("adminUsername", ""))
        if user.lower() in RESERVED_USERS:
            raise AzureRefusal("InvalidParameter", f"adminUsername '{user}' is not allowed")
        for key in ((profile.get("linuxConfiguration") or {}).get("ssh") or {}).get("publicKeys") or []:
            if key.get("path") != f"/home/{user}/.ssh/authorized_keys":
                raise AzureRefusal("InvalidParameter", f"SSH key path {key.get('path')} is not {user}'s")
        if "customData" in profile:
            try:
                base64.b64decode(str(profile["customData"]), validate=True)
            except binascii.Error:
                raise AzureRefusal("InvalidParameter", "customData is not base64") from None
        _refuse_unpublished_image((inputs.get("storageProfile") or {}).get("imageReference") or {})
        attached = (inputs.get("virtualMachineScaleSet") or {}).get("id")
        if attached is not None:
            owner = self._scale_sets.get(attached)
            if owner is None or owner.get("orchestrationMode") != "Flexible":
                raise AzureRefusal("OperationNotAllowed", "only a Flexible scale set takes a VM by reference")
            self._attached[attached] = self._attached.get(attached, 0) + 1
            if owner.get("singlePlacementGroup") and self._attached[attached] > IB_DOMAIN_DEFAULT_MAX:
                raise AzureRefusal(
                    "OperationNotAllowed",
                    f"a single placement group holds {IB_DOMAIN_DEFAULT_MAX} VMs (more on request)",
                )
        rid = self._id(inputs, "Microsoft.Compute", "virtualMachines", vm)
        return {
            "id": rid,
            "name": vm,
            "vmId": str(uuid.uuid5(uuid.NAMESPACE_URL, rid)),
            "timeCreated": "2026-11-27T09:30:00.0000000+00:00",
        }

    def _storagecache_AmlFilesystem(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        fs = inputs.get("amlFilesystemName", name)
        subnet_name, cidr = self._subnets[inputs["filesystemSubnet"]]
        if cidr.prefixlen > LUSTRE_PREFIX:
            raise AzureRefusal(
                "InvalidFilesystemSubnet", f"subnet {subnet_name} is smaller than /{LUSTRE_PREFIX}"
            )
        sku = str((inputs.get("sku") or {}).get("name", ""))
        problem = amlfs_size_problem(sku, int(inputs["storageCapacityTiB"]))
        if problem:
            raise AzureRefusal("InvalidStorageCapacity", problem)
        mgs = str(cidr.network_address + _FIRST_HOST)
        hsm = inputs.get("hsm")
        return {
            "id": self._id(inputs, "Microsoft.StorageCache", "amlFilesystems", fs),
            "name": fs,
            "clientInfo": {
                "mgsAddress": mgs,
                "mountCommand": f"mount -t lustre -o noatime,flock {mgs}@tcp:/lustrefs /lustre",
                "lustreVersion": "2.15.7",
            },
            "throughputProvisionedMBps": int(inputs["storageCapacityTiB"]) * int(sku.rsplit("-", 1)[-1]),
            "health": {"state": "Available", "statusCode": "ClusterOk"},
            **({"hsm": {**hsm, "archiveStatus": []}} if hsm else {}),
        }

    # ---- invokes --------------------------------------------------------------------------------

    def invoke(self, token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"AzureMockCloud has no answer for the invoke {token}")


# The marketplace images (publisher, offer, sku) the publishers list, for the images gpufleet boots; Azure
# compares them case-insensitively. Read 2026-11-27:
# - microsoft-dsvm:ubuntu-hpc:2204 and :2404, Microsoft's HPC images (Azure/azhpc-images, as catalog.azure
#   cites);
# - Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2 and Canonical:ubuntu-24_04-lts:server (Canonical's
#   "Find Ubuntu images on Azure", https://documentation.ubuntu.com/azure/azure-how-to/instances/find-ubuntu-images/).
PUBLISHED: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("microsoft-dsvm", "ubuntu-hpc", "2204"),
        ("microsoft-dsvm", "ubuntu-hpc", "2404"),
        ("canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2"),
        ("canonical", "ubuntu-24_04-lts", "server"),
    }
)


def _refuse_unpublished_image(reference: Mapping[str, Any]) -> None:
    """Azure's refusal of a marketplace image nobody publishes (a managed or gallery image id passes)."""
    if reference.get("id") or not reference:
        return
    parts = tuple(str(reference.get(key, "")) for key in ("publisher", "offer", "sku"))
    if tuple(part.lower() for part in parts) not in PUBLISHED:
        urn = ":".join((*parts, str(reference.get("version", ""))))
        raise AzureRefusal(
            "PlatformImageNotFound",
            f"The platform image '{urn}' is not available. Verify that all fields in the storage profile are "
            "correct.",
        )
