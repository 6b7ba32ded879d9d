"""``GcpMockCloud``: what Google Cloud would compute for the resources of ``GpuClusterGcp``, offline.

Used by ``gpufleet plan`` and the tests (``gpufleet.infra.plan.run_offline``). It answers with the fields
the provider computes, in the provider's own formats: ids and self links, subnet gateways, each NIC's
network IP taken in order from its subnet's range, the Lustre mount point (``<ip>@tcp:/<fs>``) from the
private services access range, Filestore's IP from its reserved range; and the ``gcp:compute/getImage``
and ``gcp:compute/getImages`` invokes (the baked images a test puts in ``baked_images``; none by
default). It creates nothing and needs no credentials.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import fake_id
from gpufleet.infra.tags import GCP_IMAGE_BASE_LABEL, GCP_IMAGE_HASH_LABEL
from gpufleet.spec.model import ClusterSpec, GcpProvider

API = "https://www.googleapis.com/compute/v1"


class GcpMockCloud:
    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        provider = spec.provider
        assert isinstance(provider, GcpProvider)
        self.project = provider.project
        self.region = provider.region
        self.zone = provider.zone
        self._subnets: dict[str, ipaddress.IPv4Network] = {}  # self link -> range
        self._next_host: dict[str, int] = {}
        self._ranges: dict[str, ipaddress.IPv4Network] = {}  # global address name -> range
        self._instance_ids = 0
        # The project's baked images (gpufleet image build), for gcp:compute/getImages.
        self.baked_images: list[CloudImage] = []

    # ---- resources ------------------------------------------------------------------------------

    def computed(self, type_: str, name: str, inputs: Mapping[str, Any], serial: int) -> dict[str, Any]:
        # "gcp:compute/network:Network" -> _compute_Network
        key = type_.split(":")[1].split("/")[0] + "_" + type_.split(":")[-1]
        handler = getattr(self, f"_{key}", None)
        return handler(name, inputs) if handler else {}

    def _path(self, scope: str, collection: str, name: str) -> tuple[str, str]:
        path = f"projects/{self.project}/{scope}/{collection}/{name}"
        return path, f"{API}/{path}"

    def _compute_Network(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path("global", "networks", inputs.get("name", name))
        return {"id": rid, "selfLink": link, "name": inputs.get("name", name)}

    def _compute_Subnetwork(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path(f"regions/{inputs.get('region', self.region)}", "subnetworks", inputs["name"])
        cidr = ipaddress.IPv4Network(inputs["ipCidrRange"])
        self._subnets[link] = cidr
        self._subnets[rid] = cidr
        return {"id": rid, "selfLink": link, "gatewayAddress": str(cidr.network_address + 1)}

    def _compute_Firewall(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path("global", "firewalls", inputs["name"])
        return {"id": rid, "selfLink": link}

    def _compute_Router(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path(f"regions/{inputs.get('region', self.region)}", "routers", inputs["name"])
        return {"id": rid, "selfLink": link}

    def _compute_RouterNat(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {"id": f"{self.project}/{self.region}/{inputs['router']}/{inputs['name']}"}

    def _compute_ResourcePolicy(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        region = inputs.get("region", self.region)
        rid, link = self._path(f"regions/{region}", "resourcePolicies", inputs["name"])
        return {"id": rid, "selfLink": link}

    def _compute_GlobalAddress(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path("global", "addresses", inputs["name"])
        network = ipaddress.IPv4Network(f"{inputs['address']}/{int(inputs['prefixLength'])}")
        self._ranges[inputs["name"]] = network
        return {"id": rid, "selfLink": link}

    def _servicenetworking_Connection(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": f"{inputs['network']}:{inputs['service']}",
            "peering": "servicenetworking-googleapis-com",
        }

    def _compute_Instance(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path(f"zones/{inputs.get('zone', self.zone)}", "instances", inputs["name"])
        nics = []
        for index, nic in enumerate(inputs.get("networkInterfaces") or []):
            subnet = nic.get("subnetwork", "")
            cidr = self._subnets[subnet]
            offset = self._next_host.get(subnet, 2)  # .0 and .1 (gateway) are Google's
            self._next_host[subnet] = offset + 1
            nics.append(
                {
                    **nic,
                    "name": f"nic{index}",
                    "networkIp": str(cidr.network_address + offset),
                    # An external address where the VM asks for one (the image builder alone does).
                    "accessConfigs": [
                        {**config, "natIp": "198.51.100.20"} for config in nic.get("accessConfigs") or []
                    ],
                    "network": link.split("/zones/")[0] + "/global/networks/" + subnet.rsplit("/", 1)[-1],
                    "stackType": "IPV4_ONLY",
                }
            )
        self._instance_ids += 1
        return {
            "id": rid,
            "selfLink": link,
            "instanceId": str(4_000_000_000_000_000_000 + self._instance_ids),
            "networkInterfaces": nics,
            "currentStatus": "RUNNING",
            "bootDisk": {
                **(inputs.get("bootDisk") or {}),
                "source": f"{API}/projects/{self.project}/zones/"
                f"{inputs.get('zone', self.zone)}/disks/{inputs['name']}",
            },
            "cpuPlatform": "Intel Sapphire Rapids",
        }

    def _compute_Image(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid, link = self._path("global", "images", inputs["name"])
        return {"id": rid, "selfLink": link}

    def _lustre_Instance(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid = f"projects/{self.project}/locations/{inputs['location']}/instances/{inputs['instanceId']}"
        peering = next(iter(self._ranges.values()), ipaddress.IPv4Network("10.252.0.0/20"))
        return {
            "id": rid,
            "name": rid,
            "mountPoint": f"{peering.network_address + 2}@tcp:/{inputs['filesystem']}",
            "state": "ACTIVE",
            "uid": fake_id("", rid, 32),
        }

    def _filestore_Instance(self, name: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
        rid = f"projects/{self.project}/locations/{inputs['location']}/instances/{inputs['name']}"
        networks = []
        for network in inputs.get("networks") or []:
            reserved = ipaddress.IPv4Network(network.get("reservedIpRange", "10.253.0.0/29"))
            networks.append({**network, "ipAddresses": [str(reserved.network_address + 2)]})
        return {"id": rid, "networks": networks, "createTime": "2026-11-22T09:30:00Z"}

    # ---- invokes --------------------------------------------------------------------------------

    def invoke(self, token: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if token == "gcp:compute/getImage:getImage":
            project = args.get("project") or "ubuntu-os-cloud"
            family = args.get("family") or args.get("name") or "ubuntu-2204-lts"
            image = f"{family}-v20261118"
            return {
                "id": f"projects/{project}/global/images/{image}",
                "selfLink": f"{API}/projects/{project}/global/images/{image}",
                "name": image,
                "family": family,
                "project": project,
                "status": "READY",
                "diskSizeGb": 10,
            }
        if token == "gcp:compute/getImages:getImages":
            return self._images(args)
        raise NotImplementedError(f"GcpMockCloud has no answer for the invoke {token}")

    def _images(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The baked images matching a ``labels.<key>=<value>`` filter (the only form the program sends)."""
        key, _, value = str(args.get("filter", "")).removeprefix("labels.").partition("=")
        images = []
        for image in self.baked_images:
            labels = {GCP_IMAGE_HASH_LABEL: image.digest[:63], GCP_IMAGE_BASE_LABEL: image.base}
            if labels.get(key) == value:
                _, link = self._path("global", "images", image.id)
                images.append(
                    {"name": image.id, "selfLink": link, "creationTimestamp": image.created, "labels": labels}
                )
        return {"id": args.get("project") or self.project, "images": images}
