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
import re
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
        _refuse_what_gcp_refuses(type_, name, inputs)
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
            return _public_image(args)
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


# The public image families gpufleet boots, as their publishers list them (project, family, the family's
# image at the time read); an image lookup for any other project or family fails as the provider does.
# - ubuntu-os-cloud: ubuntu-2204-lts, ubuntu-2404-lts-amd64, ubuntu-2404-lts-arm64; images named
#   ubuntu-<release>-<codename>[-<arch>]-v<date> (https://cloud.google.com/compute/docs/images/os-details,
#   Ubuntu, read 2026-11-27).
# - ubuntu-os-accelerator-images: ubuntu-accelerator-2404-amd64-with-nvidia-580, whose image
#   ubuntu-accelerator-2404-amd64-with-nvidia-580-v20260522 Cluster Toolkit's A3 Mega blueprint builds on
#   (catalog.gcp.ACCELERATOR_IMAGE_SOURCE).
# The ubuntu-os-cloud dates are of the named form; the mock does not claim those exact images exist.
PUBLIC_IMAGES: tuple[tuple[str, str, str], ...] = (
    ("ubuntu-os-cloud", "ubuntu-2204-lts", "ubuntu-2204-jammy-v20261118"),
    ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64", "ubuntu-2404-noble-amd64-v20261118"),
    ("ubuntu-os-cloud", "ubuntu-2404-lts-arm64", "ubuntu-2404-noble-arm64-v20261118"),
    (
        "ubuntu-os-accelerator-images",
        "ubuntu-accelerator-2404-amd64-with-nvidia-580",
        "ubuntu-accelerator-2404-amd64-with-nvidia-580-v20260522",
    ),
)


def _public_image(args: Mapping[str, Any]) -> dict[str, Any]:
    """``gcp:compute/getImage`` by ``family`` or ``name`` in ``project``: the publisher's image, or the
    provider's error when the project has no such family or image."""
    project = args.get("project") or ""
    family = args.get("family")
    name = args.get("name")
    for image_project, image_family, image in PUBLIC_IMAGES:
        if image_project == project and (family == image_family or (family is None and name == image)):
            return {
                "id": f"projects/{project}/global/images/{image}",
                "selfLink": f"{API}/projects/{project}/global/images/{image}",
                "name": image,
                "family": image_family,
                "project": project,
                "status": "READY",
                "diskSizeGb": 10,
            }
    # terraform-provider-google's google_compute_image data source (pulumi-gcp's getImage) passes on
    # Compute's 404 for a family or image the project does not have.
    path = f"family/{family}" if family else str(name)
    raise RuntimeError(
        f"invoking gcp:compute/getImage:getImage: googleapi: Error 404: The resource "
        f"'projects/{project}/global/images/{path}' was not found, notFound"
    )


# What Compute refuses of any resource it creates, checked here so a test fails where ``up`` would:
# - a resource name: RFC 1035, 1-63 characters, the regex Compute's error quotes ("Invalid value for field
#   'resource.name': '...'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"; Compute's
#   "Naming resources", https://cloud.google.com/compute/docs/naming-resources, read 2026-11-27);
# - labels: keys 1-63 characters starting with a lower-case letter, keys and values of lower-case letters,
#   digits, "_" and "-", values at most 63 characters, at most 64 labels ("Requirements for labels",
#   https://cloud.google.com/compute/docs/labeling-resources#requirements, read 2026-11-27).
COMPUTE_NAME = re.compile(r"(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)")
LABEL_KEY = re.compile(r"[a-z][-_a-z0-9]{0,62}")
LABEL_VALUE = re.compile(r"[-_a-z0-9]{0,63}")


def _refuse_what_gcp_refuses(type_: str, name: str, inputs: Mapping[str, Any]) -> None:
    resource_name = inputs.get("name")
    compute = type_.startswith("gcp:compute/") and isinstance(resource_name, str)
    if compute and not COMPUTE_NAME.fullmatch(str(resource_name)):
        raise RuntimeError(
            f"{type_} {name}: googleapi: Error 400: Invalid value for field 'resource.name': "
            f"'{resource_name}'. Must be a match of regex '{COMPUTE_NAME.pattern}', invalid"
        )
    labels = inputs.get("labels")
    if isinstance(labels, Mapping):
        bad = [
            f"{key}={value}"
            for key, value in labels.items()
            if not LABEL_KEY.fullmatch(str(key)) or not LABEL_VALUE.fullmatch(str(value))
        ]
        if bad or len(labels) > 64:
            raise RuntimeError(
                f"{type_} {name}: googleapi: Error 400: Invalid value for field 'resource.labels': "
                f"{bad or len(labels)} (label keys and values: lower-case letters, digits, '_' and '-',"
                " at most 63 characters, a key starting with a letter; at most 64 labels), invalid"
            )
