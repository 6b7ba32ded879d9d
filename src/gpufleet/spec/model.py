"""The cluster spec: one pydantic v2 model tree that is both the schema and the configuration object.

Every later stage (infra, inventory, roles, validation, lifecycle) reads a ``ClusterSpec`` and nothing
else. Checks that need only the spec itself live here as field and model validators; checks that need
the instance catalog or a cloud's rules live in ``gpufleet.preflight``.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpufleet.spec.units import ByteSize, Duration

# --------------------------------------------------------------------------------------------------
# Base


class SpecModel(BaseModel):
    """Base of every spec model: unknown keys are errors, with a did-you-mean hint."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        unknown = [key for key in data if key not in known]
        if not unknown:
            return data
        parts = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
            parts.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise PydanticCustomError(
            "unknown_key",
            "unknown key {keys}; accepted keys here: {accepted}",
            {"keys": ", ".join(parts), "accepted": ", ".join(sorted(known))},
        )

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        """``count: yes`` is the boolean true in YAML, which pydantic would quietly read as 1."""
        if not isinstance(data, dict):
            return data
        for key, value in data.items():
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if field is None:
                continue
            numeric, values_numeric = _numeric(field.annotation)
            at = None
            if numeric and isinstance(value, bool):
                at = key
            elif values_numeric and isinstance(value, dict):
                at = next((f"{key}.{k}" for k, v in value.items() if isinstance(v, bool)), None)
            if at is not None:
                raise PydanticCustomError("bool_for_number", "a boolean where a number belongs", {"at": at})
        return data


def _numeric(annotation: Any) -> tuple[bool, bool]:
    """(the field is a number, the field maps keys to numbers), looking through Optional and Annotated."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    origin = get_origin(annotation)
    if origin is Annotated:
        return _numeric(args[0])
    if origin in (Union, UnionType):
        return any(_numeric(a)[0] for a in args), any(_numeric(a)[1] for a in args)
    if origin is dict and len(args) == 2:
        return False, _numeric(args[1])[0]
    return annotation in (int, float), False


PATTERN_HELP: dict[str, str] = {}


def _pattern(regex: str, help_text: str) -> StringConstraints:
    """A string constraint whose mismatch message is ``help_text`` instead of the raw regex."""
    PATTERN_HELP[regex] = help_text
    return StringConstraints(pattern=regex)


def _kind_shorthand(value: Any) -> Any:
    """Let ``provider: local`` stand for ``provider: {kind: local}`` (same for fabric and filesystem)."""
    if isinstance(value, str):
        return {"kind": value}
    return value


DnsLabel = Annotated[
    str,
    _pattern(
        r"^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$",
        "expected 1-32 characters of a-z, 0-9 and '-', "
        "starting with a letter and not ending with '-', e.g. gpu",
    ),
]
ClusterName = Annotated[
    str,
    _pattern(
        r"^[a-z]([a-z0-9-]{0,22}[a-z0-9])?$",
        "expected 1-24 characters of a-z, 0-9 and '-', "
        "starting with a letter and not ending with '-' (it becomes part of host and resource "
        "names), e.g. llm-pretrain",
    ),
]
Version = Annotated[
    str,
    _pattern(r"^(distro|\d+(\.\d+){0,3}(-\d+)?)$", "expected a version such as 12.9 or 2.27.7, or 'distro'"),
]
# An exact Slurm release, e.g. 24.11.5 (preflight's slurm_release_pinned also wants it pinned in
# gpufleet.catalog.slurm: the catalog stands on the spec, so the spec does not read it).
SlurmVersion = Annotated[
    str,
    _pattern(
        r"^[0-9]+\.[0-9]+\.[0-9]+$",
        "expected an exact Slurm release such as 24.11.5 (every node runs the Slurm roles/slurm builds from "
        "SchedMD's release, never the distribution's: docs/slurm.md)",
    ),
]
PytorchVersion = Annotated[
    str, _pattern(r"^\d+\.\d+\.\d+$", "expected an exact PyTorch release such as 2.13.0")
]
AbsolutePath = Annotated[str, _pattern(r"^/[A-Za-z0-9._/-]*$", "expected an absolute path such as /shared")]
# enroot's image URIs (enroot import, doc/cmd/import.md): [REGISTRY#]IMAGE[:TAG|@DIGEST], or a squashfs file.
ContainerImage = Annotated[
    str,
    _pattern(
        r"^(/[A-Za-z0-9._/-]*\.(sqsh|squashfs)|([A-Za-z0-9.-]+(:[0-9]+)?#)?[a-z0-9]+([._/-][a-z0-9]+)*"
        r"(:[A-Za-z0-9._-]{1,128}|@sha256:[0-9a-f]{64})?)$",
        "expected a squashfs file (an absolute path ending .sqsh) or a registry reference such as "
        "nvcr.io#nvidia/pytorch:25.01-py3",
    ),
]


# --------------------------------------------------------------------------------------------------
# Provider


class ProviderKind(StrEnum):
    LOCAL = "local"
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    BAREMETAL = "baremetal"
    KUBERNETES = "kubernetes"


class LocalProvider(SpecModel):
    """A cluster of podman containers on this machine (systemd in every node, no GPU, no cloud)."""

    kind: Literal["local"] = "local"
    debian_release: Literal["bookworm"] = "bookworm"
    mirror: Annotated[str, _pattern(r"^https?://\S+$", "expected an http(s) URL")] = (
        "http://deb.debian.org/debian"
    )
    node_cpus: int = Field(default=1, ge=1, le=64, description="CPUs each node declares to Slurm")
    node_memory_mb: int = Field(default=1024, ge=256, le=65536, description="memory each node declares")
    gpu_stack: bool = Field(
        default=False,
        description="build the GPU user-space stack (CUDA and NCCL from PyPI, nccl-tests) on the compute "
        "nodes although they have no GPU; validation then runs the real binaries and reports each node's "
        "missing driver",
    )
    gpu_arch: Annotated[
        str, _pattern(r"^sm_\d{2,3}[a-z]?$", "expected a CUDA architecture such as sm_90")
    ] = Field(default="sm_90", description="with gpu_stack: the architecture nccl-tests is built for")
    net_admin: bool = Field(
        default=False,
        description="give nodes CAP_NET_ADMIN (their own network namespace only), so 'tc' can slow a "
        "node's link: the slow-node demo (gpufleet run --slow-node)",
    )


_AWS_REGION = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$"
_GCP_REGION = r"^[a-z]+-[a-z]+\d+$"


class AwsAmi(SpecModel):
    """The machine image: found by ``family`` (the default) or pinned by ``id``."""

    family: Literal["ubuntu-22.04", "ubuntu-24.04", "dlami-base-ubuntu-22.04", "dlami-base-ubuntu-24.04"] = (
        "ubuntu-22.04"
    )
    id: (
        Annotated[str, _pattern(r"^ami-[0-9a-f]{8,17}$", "expected an AMI id such as ami-0abc1234def567890")]
        | None
    ) = None


class AwsProvider(SpecModel):
    kind: Literal["aws"] = "aws"
    region: Annotated[str, _pattern(_AWS_REGION, "expected an AWS region such as us-east-1")] = Field(
        description="the AWS region"
    )
    zone: Annotated[
        str,
        _pattern(
            r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d[a-z]$",
            "expected an AWS availability zone such as us-east-1a",
        ),
    ]
    vpc_id: (
        Annotated[str, _pattern(r"^vpc-[0-9a-f]{8,17}$", "expected a VPC id such as vpc-0abc1234")] | None
    ) = None
    subnet_id: (
        Annotated[str, _pattern(r"^subnet-[0-9a-f]{8,17}$", "expected a subnet id such as subnet-0abc1234")]
        | None
    ) = None
    ami: AwsAmi = AwsAmi()
    ssm: bool = Field(default=True, description="reach nodes through SSM Session Manager")

    @model_validator(mode="after")
    def _zone_in_region(self) -> AwsProvider:
        if not self.zone.startswith(self.region):
            raise PydanticCustomError(
                "zone_region",
                "zone '{zone}' is not in region '{region}'; pick a zone such as '{region}a'",
                {"zone": self.zone, "region": self.region, "at": "zone"},
            )
        if (self.vpc_id is None) != (self.subnet_id is None):
            raise PydanticCustomError(
                "vpc_subnet",
                "give both vpc_id and subnet_id to use an existing network, or neither to create one",
            )
        return self


class GcpProvider(SpecModel):
    kind: Literal["gcp"] = "gcp"
    project: Annotated[
        str, _pattern(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$", "expected a GCP project id such as my-project-123")
    ]
    region: Annotated[str, _pattern(_GCP_REGION, "expected a GCP region such as us-central1")]
    zone: Annotated[str, _pattern(r"^[a-z]+-[a-z]+\d+-[a-z]$", "expected a GCP zone such as us-central1-a")]
    image: str | None = Field(
        default=None, description="image self-link or family path; default: per machine family"
    )

    @model_validator(mode="after")
    def _zone_in_region(self) -> GcpProvider:
        if not self.zone.startswith(self.region + "-"):
            raise PydanticCustomError(
                "zone_region",
                "zone '{zone}' is not in region '{region}'; pick a zone such as '{region}-a'",
                {"zone": self.zone, "region": self.region, "at": "zone"},
            )
        return self


# An Azure subscription id (a GUID) and a region's programmatic name ('az account list-locations --query
# "[].name"': eastus, southcentralus, swedencentral).
_AZURE_SUBSCRIPTION = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_AZURE_LOCATION = r"^[a-z]+[a-z0-9]*$"
# A marketplace image URN, publisher:offer:sku:version ('az vm image list --all' prints it).
_AZURE_URN = (
    r"^[A-Za-z0-9][A-Za-z0-9._-]*:[A-Za-z0-9][A-Za-z0-9._-]*:[A-Za-z0-9][A-Za-z0-9._-]*:[A-Za-z0-9._-]+$"
)
# A managed image or a Compute Gallery image (version) resource id.
_AZURE_IMAGE_ID = (
    r"^/subscriptions/[0-9a-f-]{36}/resourceGroups/[A-Za-z0-9._()-]+/providers/Microsoft\.Compute/"
    r"(images/[A-Za-z0-9._-]+|galleries/[A-Za-z0-9._]+/images/[A-Za-z0-9._-]+(/versions/[0-9.]+)?)$"
)


class AzureImage(SpecModel):
    """The image the GPU nodes boot: Microsoft's Ubuntu HPC image for the SKU (the default), a marketplace
    image by ``urn``, or a managed or Compute Gallery image by ``id`` (a gpufleet-baked or a site's own)."""

    urn: (
        Annotated[
            str,
            _pattern(
                _AZURE_URN, "expected publisher:offer:sku:version, e.g. microsoft-dsvm:ubuntu-hpc:2204:latest"
            ),
        ]
        | None
    ) = None
    id: (
        Annotated[
            str,
            _pattern(
                _AZURE_IMAGE_ID,
                "expected a managed image or Compute Gallery image id, "
                "/subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Compute/...",
            ),
        ]
        | None
    ) = None
    architecture: Literal["x64", "Arm64"] | None = Field(
        default=None,
        description="the CPU architecture the image is built for; default: the catalog's for a known URN. "
        "Needed for an image 'id' or an unknown URN (preflight compares it with the SKU's)",
    )
    generation: Literal["V1", "V2"] = Field(
        default="V2", description="the Hyper-V generation of the image (ND v5 and v6 boot Gen2 only)"
    )
    os_release: Literal["ubuntu-22.04", "ubuntu-24.04"] | None = Field(
        default=None,
        description="the Ubuntu release of an image 'id' or an unknown URN; default: the catalog's",
    )

    @model_validator(mode="after")
    def _one_source(self) -> AzureImage:
        if self.urn is not None and self.id is not None:
            raise PydanticCustomError(
                "image_source", "give the image's 'urn' or its 'id', not both", {"at": "id"}
            )
        return self


class AzureProvider(SpecModel):
    """Microsoft Azure: one resource group per cluster in ``subscription``, in region ``location``."""

    kind: Literal["azure"] = "azure"
    subscription: Annotated[
        str,
        _pattern(
            _AZURE_SUBSCRIPTION,
            "expected a subscription id (a GUID, lower case), e.g. 00000000-1111-2222-3333-444444444444",
        ),
    ] = Field(description="the subscription the cluster's resource group is made in")
    location: Annotated[
        str, _pattern(_AZURE_LOCATION, "expected an Azure region name such as eastus or southcentralus")
    ] = Field(description="the Azure region (its programmatic name)")
    zone: Literal["1", "2", "3"] | None = Field(
        default=None,
        description="an availability zone for the nodes and the Managed Lustre file system; null: regional "
        "(no zone), where the SKU's capacity is not zonal",
    )
    image: AzureImage = Field(default=AzureImage(), description="the image the GPU nodes boot")
    ib_domain_max_vms: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="the most VMs one scale set (one InfiniBand domain) may hold: 100 by default, more "
        "only where Microsoft raised the subscription's limit on request",
    )
    address_space: ipaddress.IPv4Network = Field(
        default=ipaddress.IPv4Network("10.40.0.0/16"),
        description="the cluster's virtual network (a /16 to a /20, private): nodes, Bastion and Lustre "
        "get subnets of it",
    )

    @field_validator("address_space")
    @classmethod
    def _private_range(cls, value: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not value.is_private or not 16 <= value.prefixlen <= 20:
            raise PydanticCustomError(
                "address_space",
                "'{value}' must be a private range from /16 to /20 (the nodes, Bastion and Lustre subnets "
                "are cut from it), e.g. 10.40.0.0/16",
                {"value": str(value)},
            )
        return value


class BaremetalProvider(SpecModel):
    """Machines that already exist, described by a hand-written Ansible inventory."""

    kind: Literal["baremetal"] = "baremetal"
    inventory: Annotated[str, StringConstraints(min_length=1)] = Field(
        description="path to the Ansible inventory (see inventories/examples/), relative to the spec file"
    )

    @field_validator("inventory")
    @classmethod
    def _relative_to_spec(cls, value: str, info: ValidationInfo) -> str:
        """A relative path is read from the spec file's folder, wherever gpufleet is run from."""
        base = (info.context or {}).get("base_dir")
        path = Path(value).expanduser()
        if base is not None and not path.is_absolute():
            return str(Path(base) / path)
        return str(path) if value.startswith("~") else value


class KubernetesProvider(SpecModel):
    """A Kubernetes cluster that already exists (EKS, GKE, AKS, CoreWeave, on-premises with NVIDIA's GPU
    Operator), handed over as a kubeconfig and a context; gpufleet makes no machine. Its jobs run as pods and
    MPIJobs: ``scheduler: {kind: kubernetes, ...}`` (docs/kubernetes.md)."""

    kind: Literal["kubernetes"] = "kubernetes"
    kubeconfig: str | None = Field(
        default=None,
        description="the kubeconfig file, relative to the spec file; default: $KUBECONFIG, else "
        "~/.kube/config",
    )
    context: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = Field(
        default=None, description="the kubeconfig context to use; default: its current-context"
    )

    @field_validator("kubeconfig")
    @classmethod
    def _relative_to_spec(cls, value: str | None, info: ValidationInfo) -> str | None:
        """A relative path is read from the spec file's folder, wherever gpufleet is run from."""
        if value is None:
            return None
        return BaremetalProvider._relative_to_spec(value, info)


Provider = Annotated[
    LocalProvider | AwsProvider | GcpProvider | AzureProvider | BaremetalProvider | KubernetesProvider,
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------------------------------
# Node groups


class Role(StrEnum):
    CONTROLLER = "controller"
    LOGIN = "login"
    COMPUTE = "compute"


class CapacityMode(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVATION = "reservation"
    CAPACITY_BLOCK = "capacity_block"
    FLEX_START = "flex_start"  # GCP: Dynamic Workload Scheduler flex-start VMs, bounded by max_run_duration


class Capacity(SpecModel):
    """How the group's machines are bought."""

    mode: CapacityMode = CapacityMode.ON_DEMAND
    reservation: str | None = Field(
        default=None,
        description="AWS: the capacity reservation id (cr-...) of an ODCR or Capacity Block; "
        "GCP: the reservation name",
    )
    reservation_group_arn: str | None = Field(
        default=None, description="AWS only: a capacity reservation resource group instead of one id"
    )
    placement_group: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")] | None
    ) = Field(
        default=None,
        description="mode reservation: AWS: the existing cluster placement group the capacity "
        "reservation was created in (its instances must launch into that group); GCP: the name of the "
        "reservation's own compact placement policy, which its VMs then carry",
    )
    reservation_type: Literal["standard", "dense", "calendar"] | None = Field(
        default=None,
        description="GCP only, mode reservation: how the reservation was made: 'calendar' (auto-created "
        "from a future reservation in calendar mode) or 'dense' (AI Hypercomputer, deployment type DENSE) "
        "make its VMs RESERVATION_BOUND; 'standard' (an ordinary on-demand reservation) does not. Default: "
        "calendar for series without on-demand capacity (A3 Ultra, A4), else standard",
    )
    max_run_duration: Duration | None = Field(
        default=None,
        description="GCP flex_start only: how long the VMs run before Compute Engine deletes them "
        "(e.g. 3d; from 30 seconds to 7 days, Google's bounds)",
    )

    @model_validator(mode="after")
    def _reservation_given(self) -> Capacity:
        if self.placement_group is not None and self.mode is not CapacityMode.RESERVATION:
            raise PydanticCustomError(
                "placement_group_unused",
                "'placement_group' names the placement group a capacity reservation was made in; it is "
                "only read with mode 'reservation', not '{mode}'",
                {"mode": self.mode.value},
            )
        if self.reservation_type is not None and self.mode is not CapacityMode.RESERVATION:
            raise PydanticCustomError(
                "reservation_type_unused",
                "'reservation_type' says how a GCP reservation was made; it is only read with mode "
                "'reservation', not '{mode}'",
                {"mode": self.mode.value},
            )
        flex = self.mode is CapacityMode.FLEX_START
        if flex != (self.max_run_duration is not None):
            raise PydanticCustomError(
                "max_run_duration",
                "capacity mode 'flex_start' needs 'max_run_duration' (how long the VMs may run), and only "
                "it takes one; got mode '{mode}'",
                {"mode": self.mode.value},
            )
        needs = self.mode in (CapacityMode.RESERVATION, CapacityMode.CAPACITY_BLOCK)
        given = self.reservation is not None or self.reservation_group_arn is not None
        if needs and not given:
            raise PydanticCustomError(
                "reservation_missing",
                "capacity mode '{mode}' needs 'reservation' (or, on AWS, 'reservation_group_arn')",
                {"mode": self.mode.value},
            )
        if not needs and given:
            raise PydanticCustomError(
                "reservation_unused",
                "'reservation' is only read with mode 'reservation' or 'capacity_block', not '{mode}'",
                {"mode": self.mode.value},
            )
        if self.mode is CapacityMode.CAPACITY_BLOCK and self.reservation_group_arn is not None:
            raise PydanticCustomError(
                "capacity_block_group",
                "a Capacity Block is targeted by its reservation id; drop 'reservation_group_arn'",
            )
        return self


class NodeGroup(SpecModel):
    name: DnsLabel = Field(description="the group's name; host names are <cluster>-<group>[-<i>]")
    roles: list[Role] = Field(min_length=1, description="controller, login and/or compute")
    instance_type: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        description="a catalog type (docs/catalog.md); 'local' for the local backend"
    )
    count: int = Field(default=1, ge=1, le=4096, description="nodes in the group (1 for the controller)")
    capacity: Capacity = Field(default=Capacity(), description="how the machines are bought (clouds)")
    root_volume_gib: int = Field(default=200, ge=8, le=16384, description="encrypted root volume size")

    @field_validator("roles", mode="before")
    @classmethod
    def _role_shorthand(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _roles_consistent(self) -> NodeGroup:
        if len(set(self.roles)) != len(self.roles):
            raise PydanticCustomError("roles_repeat", "a role is listed twice in roles")
        if Role.CONTROLLER in self.roles and self.count != 1:
            raise PydanticCustomError(
                "controller_count",
                "the controller group runs one slurmctld: set count: 1 (got {count})",
                {"count": self.count},
            )
        if Role.COMPUTE in self.roles and Role.CONTROLLER in self.roles:
            raise PydanticCustomError(
                "controller_compute",
                "a controller group cannot also be compute; put the compute nodes in a group of their own",
            )
        return self


# --------------------------------------------------------------------------------------------------
# Fabric and filesystem


class FabricKind(StrEnum):
    EFA = "efa"
    INFINIBAND = "infiniband"
    ROCE = "roce"
    TCPX = "tcpx"
    TCPXO = "tcpxo"
    ETHERNET = "ethernet"


class Fabric(SpecModel):
    """The GPU-to-GPU network between nodes."""

    kind: FabricKind = Field(
        default=FabricKind.ETHERNET, description="the inter-node network for collectives"
    )
    interfaces: int | None = Field(
        default=None, ge=0, le=64, description="fabric interfaces per node; default: the catalog's count"
    )


class NoFilesystem(SpecModel):
    kind: Literal["none"] = "none"


class VolumeFilesystem(SpecModel):
    """Local backend: a podman volume mounted on every node."""

    kind: Literal["volume"] = "volume"
    mount_point: AbsolutePath = "/shared"


class NfsFilesystem(SpecModel):
    """Bare metal: an NFS export that already exists."""

    kind: Literal["nfs"] = "nfs"
    server: Annotated[str, StringConstraints(min_length=1)]
    export: AbsolutePath
    mount_point: AbsolutePath = "/shared"


class S3DataRepository(SpecModel):
    s3_path: Annotated[
        str,
        _pattern(
            r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
            "expected an S3 path such as s3://my-bucket/prefix",
        ),
    ]
    file_system_path: AbsolutePath = "/data"
    import_metadata: bool = True
    auto_export: bool = False


class FsxLustreFilesystem(SpecModel):
    """AWS FSx for Lustre in the cluster's subnet, encrypted."""

    kind: Literal["fsx_lustre"] = "fsx_lustre"
    size_gib: int = Field(ge=1200)
    deployment_type: Literal["PERSISTENT_2", "SCRATCH_2"] = "PERSISTENT_2"
    throughput_per_tib: int | None = Field(
        default=250, description="PERSISTENT_2 only: MB/s per TiB (125, 250, 500 or 1000)"
    )
    data_repository: S3DataRepository | None = None
    mount_point: AbsolutePath = "/fsx"
    compression: Literal["LZ4", "NONE"] = Field(
        default="LZ4", description="data compression (LZ4 saves space and throughput for most data)"
    )
    efa: bool = Field(
        default=False,
        description="PERSISTENT_2 only: EFA and GPUDirect Storage to the file system (with automatic "
        "metadata configuration)",
    )

    @model_validator(mode="after")
    def _throughput_for_type(self) -> FsxLustreFilesystem:
        if self.efa and self.deployment_type != "PERSISTENT_2":
            raise PydanticCustomError(
                "fsx_efa",
                "an EFA-enabled FSx for Lustre is PERSISTENT_2 only: set deployment_type or drop efa",
            )
        if self.deployment_type == "SCRATCH_2" and self.throughput_per_tib not in (None, 200):
            raise PydanticCustomError(
                "scratch_throughput",
                "SCRATCH_2 has a fixed 200 MB/s per TiB: drop throughput_per_tib",
            )
        return self


class GcsDataRepository(SpecModel):
    """Where ``gpufleet down`` exports a Managed Lustre instance's files before deleting it (the
    instance's exportData; docs/gcp.md, "Checkpoints and down")."""

    gcs_path: Annotated[
        str,
        _pattern(
            r"^gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?$",
            "expected a Cloud Storage path such as gs://my-bucket/checkpoints/",
        ),
    ] = Field(description="the bucket, or a folder in it, that keeps the durable copy")
    file_system_path: AbsolutePath = Field(
        default="/", description="the folder of the instance to export, from its root"
    )


class ManagedLustreFilesystem(SpecModel):
    """Google Cloud Managed Lustre in the cluster's network."""

    kind: Literal["managed_lustre"] = "managed_lustre"
    size_gib: int = Field(ge=9000)
    throughput_per_tib: Literal[125, 250, 500, 1000] = 500
    filesystem_name: Annotated[
        str,
        _pattern(r"^[a-z][a-z0-9]{0,7}$", "expected 1-8 characters of a-z and 0-9, starting with a letter"),
    ] = "lustre"
    mount_point: AbsolutePath = "/lustre"
    data_repository: GcsDataRepository | None = Field(
        default=None,
        description="a Cloud Storage copy 'gpufleet down' exports to before it deletes the instance",
    )


class BlobDataRepository(SpecModel):
    """The Blob container an Azure Managed Lustre file system hydrates from and archives to: its durable
    copy, which ``gpufleet down`` archives to before it deletes the file system (docs/azure.md). It lives
    outside the cluster's resource group, so it outlives the cluster."""

    storage_account_id: Annotated[
        str,
        _pattern(
            r"^/subscriptions/[0-9a-f-]{36}/resourceGroups/[A-Za-z0-9._()-]+/providers/"
            r"Microsoft\.Storage/storageAccounts/[a-z0-9]{3,24}$",
            "expected a storage account id, /subscriptions/<id>/resourceGroups/<rg>/providers/"
            "Microsoft.Storage/storageAccounts/<name>",
        ),
    ] = Field(description="the storage account (hierarchical namespace off) that holds both containers")
    container: Annotated[
        str,
        _pattern(
            r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
            "expected a container name: 3-63 of a-z, 0-9 and '-'",
        ),
    ] = Field(description="the container of the durable copy")
    logging_container: Annotated[
        str,
        _pattern(
            r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",
            "expected a container name: 3-63 of a-z, 0-9 and '-'",
        ),
    ] = Field(
        default="lustre-logs",
        description="a second container of the same account for the file system's import and archive logs",
    )
    file_system_path: AbsolutePath = Field(
        default="/", description="the folder of the file system to archive, from its root"
    )

    @model_validator(mode="after")
    def _two_containers(self) -> BlobDataRepository:
        if self.container == self.logging_container:
            raise PydanticCustomError(
                "logging_container",
                "Managed Lustre logs to a container of its own: set logging_container to another name than "
                "'{name}'",
                {"name": self.container, "at": "logging_container"},
            )
        return self

    @property
    def account_name(self) -> str:
        return self.storage_account_id.rsplit("/", 1)[-1]

    @property
    def container_url(self) -> str:
        return f"https://{self.account_name}.blob.core.windows.net/{self.container}"


class AzureLustreFilesystem(SpecModel):
    """Azure Managed Lustre (an AML file system) in a subnet of the cluster's network."""

    kind: Literal["azure_lustre"] = "azure_lustre"
    sku: Literal[
        "AMLFS-Durable-Premium-40",
        "AMLFS-Durable-Premium-125",
        "AMLFS-Durable-Premium-250",
        "AMLFS-Durable-Premium-500",
    ] = Field(default="AMLFS-Durable-Premium-250", description="the throughput tier, MB/s per TiB")
    size_tib: int = Field(ge=4, le=12500, description="capacity in TiB (steps per SKU: gpufleet check)")
    mount_point: AbsolutePath = "/lustre"
    data_repository: BlobDataRepository | None = Field(
        default=None,
        description="a Blob container the file system archives to before 'gpufleet down' deletes it",
    )

    @property
    def throughput_per_tib(self) -> int:
        return int(self.sku.rsplit("-", 1)[-1])


class FilestoreFilesystem(SpecModel):
    """Google Cloud Filestore (NFS)."""

    kind: Literal["filestore"] = "filestore"
    tier: Literal["BASIC_HDD", "BASIC_SSD", "ZONAL", "REGIONAL"] = "ZONAL"
    size_gib: int = Field(ge=1024)
    share_name: Annotated[
        str,
        _pattern(
            r"^[a-z][a-z0-9_]{0,15}$", "expected 1-16 characters of a-z, 0-9 and '_', starting with a letter"
        ),
    ] = "shared"
    mount_point: AbsolutePath = "/shared"


Filesystem = Annotated[
    NoFilesystem
    | VolumeFilesystem
    | NfsFilesystem
    | FsxLustreFilesystem
    | ManagedLustreFilesystem
    | FilestoreFilesystem
    | AzureLustreFilesystem,
    Field(discriminator="kind"),
]

FILESYSTEMS_BY_PROVIDER: dict[str, tuple[str, ...]] = {
    "local": ("none", "volume"),
    "baremetal": ("none", "nfs"),
    "aws": ("none", "fsx_lustre"),
    "gcp": ("none", "managed_lustre", "filestore"),
    "azure": ("none", "azure_lustre"),
    "kubernetes": ("none",),  # pods see a PersistentVolumeClaim instead: scheduler.kubernetes.shared_volume
}


# --------------------------------------------------------------------------------------------------
# Software, access, lifetime


class Software(SpecModel):
    """Versions the roles install (or, on images that carry the stack, the minimums they verify).
    ``distro`` means the operating system's own package (Slurm is always built from its release)."""

    nvidia_driver: Version = Field(default="580", description="driver branch, e.g. 570 or 580")
    cuda: Version = "12.9"
    nccl: Version = "2.27.7"
    nccl_tests: Version = "2.19.6"
    efa_installer: Version = "1.49.0"
    # The aws-ofi-nccl that EFA installer 1.49.0 bundles: "EFA installer 1.49.0 vends libfabric 2.4.0amzn5.0
    # and aws-ofi-nccl 1.20.0" (aws/deep-learning-containers docker/base/cu132/Dockerfile, commit 149d8e5,
    # read 2026-11-24); the installer's own changelog could not be read here. Move it with efa_installer.
    aws_ofi_nccl: Version = "1.20.0"
    slurm: SlurmVersion = Field(
        default="24.11.5",
        description="the Slurm release roles/slurm builds from SchedMD's release tarball and installs on "
        "every node (docs/slurm.md); one whose checksum gpufleet pins (gpufleet.catalog.slurm)",
    )
    openmpi: Version = Field(
        default="distro",
        description="the Open MPI the nodes run: 'distro' only, the operating system's (roles/mpi); a "
        "release is refused until a role installs one",
    )
    gpu_packages: Literal["repo", "pypi"] = Field(
        default="repo",
        description="where CUDA and NCCL come from when the roles install them: NVIDIA's package "
        "repository, or NVIDIA's wheels on PyPI (sites without the repository; the local backend)",
    )
    pytorch: PytorchVersion | None = Field(
        default=None,
        description="the PyTorch release roles/pytorch installs in a virtualenv (/opt/gpufleet/torch) on "
        "every compute node, e.g. 2.13.0: the CPU build on nodes without GPUs, the CUDA build for "
        "software.cuda on GPU nodes (docs/training.md). The training check (validation.training) needs it. "
        "null: not installed",
    )
    monitoring: bool = Field(
        default=True,
        description="install and run the monitoring stack (roles/monitoring, docs/monitoring.md): Prometheus "
        "and alertmanager on the controller, node_exporter and the job exporter on every node, the Slurm "
        "exporter, dcgm-exporter on GPU nodes (the local backend: a stand-in labelled simulated). "
        "'gpufleet util' and the report 'down' writes read it. On by default; false: none of it is "
        "installed",
    )
    containers: bool = Field(
        default=True,
        description="install enroot and pyxis on every node (roles/containers, docs/containers.md), so jobs "
        "run with 'srun --container-image'. false: neither is installed, and container_image must be unset",
    )
    container_image: ContainerImage | None = Field(
        default=None,
        description="the image the collectives and the training check run inside (docs/containers.md): a "
        "squashfs file on the control host (an absolute path ending .sqsh, the local backend), or a "
        "registry reference enroot imports, e.g. nvcr.io#nvidia/pytorch:25.01-py3. Staged once on the "
        "shared filesystem. null: validation runs on the nodes themselves",
    )

    @field_validator("openmpi")
    @classmethod
    def _openmpi_is_the_distributions(cls, value: str) -> str:
        # A pin no role reads would be accepted and silently not installed (issue 30 step 3).
        if value != "distro":
            raise PydanticCustomError(
                "unread_pin",
                "no role installs Open MPI {version}: roles/mpi installs the operating system's Open MPI "
                "(openmpi-bin); leave software.openmpi out or set it to 'distro'",
                {"version": value},
            )
        return value

    @field_validator("container_image")
    @classmethod
    def _squashfs_is_absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/") and value.endswith((".sqsh", ".squashfs")):
            raise PydanticCustomError(
                "relative_squashfs",
                "a squashfs image is a file on the control host: give its absolute path, e.g. "
                "/srv/images/{name}",
                {"name": value.rsplit("/", 1)[-1]},
            )
        return value

    @model_validator(mode="after")
    def _image_needs_containers(self) -> Software:
        if self.container_image is not None and not self.containers:
            raise PydanticCustomError(
                "image_needs_containers",
                "software.container_image is set but software.containers is false: enroot and pyxis run "
                "the image; set containers: true or remove container_image",
            )
        return self


_SSH_KEY = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
    r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( .*)?$"
)


class Access(SpecModel):
    """Who may reach the cluster. Nothing is open to the internet by default."""

    ssh_public_key: str | None = Field(
        default=None,
        description="an extra public key for the admin user; gpufleet always makes one key per cluster",
    )
    allowed_cidrs: list[ipaddress.IPv4Network] = Field(
        default_factory=list, description="CIDRs allowed to reach SSH on the login node; none by default"
    )

    @field_validator("ssh_public_key")
    @classmethod
    def _key_text(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if value.startswith(("/", "~", "./")) or value.endswith(".pub"):
            raise PydanticCustomError(
                "ssh_key_path",
                'give the public key\'s text, not a path: ssh_public_key: "$(cat {path})"',
                {"path": value},
            )
        if not _SSH_KEY.match(value):
            raise PydanticCustomError(
                "ssh_key_format",
                "not an OpenSSH public key; expected a line such as 'ssh-ed25519 AAAA... you@host'",
            )
        return value

    @field_validator("allowed_cidrs", mode="before")
    @classmethod
    def _strict_cidrs(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        for item in value:
            try:
                network = ipaddress.IPv4Network(str(item), strict=True)
            except ValueError as exc:
                raise PydanticCustomError(
                    "cidr",
                    "'{item}' is not an IPv4 CIDR with its host bits zero ({reason}); e.g. 203.0.113.0/24",
                    {"item": str(item), "reason": str(exc)},
                ) from exc
            if network.prefixlen < 8:
                raise PydanticCustomError(
                    "cidr_open",
                    "'{item}' opens SSH to a large part of the internet; list your own range, e.g. "
                    "203.0.113.0/24, or none and use SSM / IAP",
                    {"item": str(item)},
                )
        return value


class Lifetime(SpecModel):
    ttl: Duration = Field(default=timedelta(hours=24), description="the cluster expires after this")
    on_expiry: Literal["destroy", "warn"] = "destroy"

    @field_validator("ttl")
    @classmethod
    def _ttl_range(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=15) <= value <= timedelta(days=30):
            raise PydanticCustomError("ttl_range", "ttl must be between 15m and 30d")
        return value


# --------------------------------------------------------------------------------------------------
# Validation


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SENDRECV = "sendrecv"
    GATHER = "gather"
    SCATTER = "scatter"


class TrainingCheck(SpecModel):
    """The training check: after nccl-tests, ``gpufleet validate`` runs the data-parallel PyTorch job of
    examples/jobs/ (train.sbatch + train_ddp.py, exactly as users copy it) through Slurm on the same nodes,
    sourcing the same NCCL environment file: NCCL on GPU nodes, gloo on CPU nodes. It passes when every rank
    joins within ``join_timeout``, the parameters are bit-identical on every rank after ``steps`` steps and
    the loss fell, no rank is a straggler (``max_step_spread``), DDP's all-reduce reaches
    ``min_allreduce_fraction`` of nccl-tests' all_reduce at that size (GPU clusters), and a checkpoint written
    to the shared filesystem reads back equal. Needs ``software.pytorch`` and a shared filesystem."""

    enabled: bool = Field(default=False, description="run the training check (docs/training.md)")
    steps: int = Field(default=60, ge=10, le=100000, description="DDP steps of the job")
    checkpoint_every: int = Field(
        default=20, ge=1, le=100000, description="steps between checkpoints (the last step always writes one)"
    )
    join_timeout: Duration = Field(
        default=timedelta(minutes=2),
        description="every rank must join the job's process group within this (torchrun's join_timeout)",
    )
    max_step_spread: float = Field(
        default=1.5,
        gt=1,
        le=100,
        description="the slowest rank's own step time (its compute + a gradient-sized send from it) over the "
        "median rank's; above it the slowest ranks are named as stragglers",
    )
    min_allreduce_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1.5,
        description="GPU clusters: DDP's gradient all-reduce bus bandwidth must reach this fraction of "
        "nccl-tests' all_reduce at that message size (CPU clusters: reported only)",
    )


# Bytes a checkpoint holds per model parameter, by what the job saves. Mixed precision with Adam keeps
# 16-bit parameters (2) and, in fp32, a master copy, momentum and variance (4 + 4 + 4): ZeRO (Rajbhandari et
# al., arXiv:1910.02054, section 3.1, read 2026-11-24) counts these "2 + 2 + 12" bytes with the 16-bit
# gradients, which a checkpoint does not save. fp32 Adam: parameters, momentum, variance.
CHECKPOINT_STATE_BYTES: dict[str, int] = {
    "mixed-adam": 14,
    "fp32-adam": 12,
    "bf16-weights": 2,
    "fp32-weights": 4,
}
_PARAMETER_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT]?)\s*$", re.IGNORECASE)
_PARAMETER_FACTORS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def _parameter_count(value: object) -> object:
    """``7B``, ``405B``, ``1.5B``, ``125M`` or a plain number -> a parameter count (decimal multiples)."""
    if isinstance(value, str):
        match = _PARAMETER_COUNT.match(value)
        if not match:
            raise PydanticCustomError(
                "parameters", "expected a parameter count such as 7B, 1.5B, 125M or 7000000000"
            )
        return int(float(match.group(1)) * _PARAMETER_FACTORS[match.group(2).upper()])
    return value


class CheckpointPlan(SpecModel):
    """The checkpoints the cluster's training jobs will write, for ``gpufleet check`` to size against the
    shared filesystem: how big one is, how long it takes at the filesystem's provisioned throughput, what
    share of the interval that is, the room ``keep`` of them need, and the interval that minimizes the work
    lost to failures plus the time spent writing (Young's, from the cluster's expected time between
    failures). docs/training.md, "Checkpoint planning"."""

    parameters: Annotated[int, BeforeValidator(_parameter_count), Field(ge=1, le=10**14)] = Field(
        description="the model's parameter count: 7B, 405B, 125M or a number"
    )
    state: Literal["mixed-adam", "fp32-adam", "bf16-weights", "fp32-weights"] = Field(
        default="mixed-adam",
        description="what a checkpoint holds: mixed-adam 14 bytes per parameter (16-bit weights, fp32 "
        "master copy and Adam moments), fp32-adam 12, bf16-weights 2, fp32-weights 4",
    )
    interval: Duration = Field(default=timedelta(minutes=30), description="time between checkpoints")
    keep: int = Field(default=2, ge=1, le=1000, description="complete checkpoints kept on the filesystem")
    node_mtbf: Duration = Field(
        default=timedelta(days=264),
        description="expected time between failures that stop a job, per node (default: Llama 3's 405B "
        "run, 419 unexpected interruptions in 54 days on 2,048 8-GPU servers)",
    )

    @field_validator("interval", "node_mtbf")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value.total_seconds() < 60:
            raise PydanticCustomError("checkpoint_time", "expected at least a minute, such as 30m or 264d")
        return value


class ValidationSpec(SpecModel):
    """What ``gpufleet validate`` runs and what it expects."""

    collectives: list[Collective] = Field(
        default_factory=lambda: [Collective.ALL_REDUCE, Collective.ALL_GATHER], min_length=1
    )
    min_bytes: ByteSize = 8
    max_bytes: ByteSize = 16 << 30
    step_factor: int = Field(default=2, ge=2, le=16)
    iterations: int = Field(default=20, ge=1, le=10000)
    warmup_iterations: int = Field(default=5, ge=0, le=1000)
    gate_min_bytes: ByteSize = Field(
        default=1 << 30, description="bus bandwidth is judged on rows of at least this size"
    )
    baseline_margin: float = Field(
        default=0.9, gt=0, le=1.5, description="pass at or above this fraction of the baseline busbw"
    )
    min_busbw: dict[Collective, float] = Field(
        default_factory=dict, description="explicit busbw floors in GB/s; override the catalog's baseline"
    )
    # Microsoft gates ND H100 v5 at expected ~450, warn < 400, drain < 300 GB/s: 300 / 450 = 0.67
    # (Azure/ai-infrastructure-on-azure@a01b073 skills/slurm/sku_performance_baseline/SKILL.md, read
    # 2026-11-27); the pass margin's 0.9 is AICR's rule (NVIDIA/aicr@bc05c6b validators/performance/
    # nccl_all_reduce_bw_constraint.go l.166-167).
    drain_fraction: float = Field(
        default=0.67,
        gt=0,
        lt=1,
        description="below this fraction of the expected busbw a collective fails (bisection, drain); "
        "between it and baseline_margin it warns and is re-run once",
    )
    rerun_on_warn: bool = Field(
        default=True, description="re-run a collective once when it lands between drain floor and margin"
    )
    baseline: Literal["catalog", "ledger"] = Field(
        default="catalog",
        description="'ledger': gate on this site's own passing runs of the same type, node count and "
        "versions (gpufleet baseline), where there are any; else the catalog's",
    )
    ready_timeout: Duration = Field(
        default=timedelta(minutes=5),
        description="how long each node may take to have its fabric ready (devices, links, GPUs, NCCL env "
        "file) before it is left out of the benchmark",
    )
    health_checks: bool = True
    find_bad_nodes: bool = True
    drain_bad_nodes: bool = False
    timeout: Duration = Field(default=timedelta(minutes=30))
    training: TrainingCheck = Field(
        default=TrainingCheck(),
        description="the training check: a data-parallel PyTorch job through Slurm, gated (docs/training.md)",
    )

    @field_validator("timeout")
    @classmethod
    def _timeout_range(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= timedelta(days=7):
            raise PydanticCustomError("timeout_range", "timeout must be between 1m and 7d")
        return value

    @model_validator(mode="after")
    def _sizes(self) -> ValidationSpec:
        if self.min_bytes > self.max_bytes:
            raise PydanticCustomError(
                "size_range",
                "min_bytes ({lo}) is larger than max_bytes ({hi})",
                {"lo": self.min_bytes, "hi": self.max_bytes},
            )
        if self.gate_min_bytes > self.max_bytes:
            raise PydanticCustomError(
                "gate_size",
                "gate_min_bytes ({gate}) is above max_bytes ({hi}): no row would be judged; lower "
                "gate_min_bytes or raise max_bytes",
                {"gate": self.gate_min_bytes, "hi": self.max_bytes},
            )
        if self.drain_fraction >= self.baseline_margin:
            raise PydanticCustomError(
                "drain_fraction",
                "drain_fraction ({drain}) must be below baseline_margin ({margin}): between them a run warns "
                "and is re-run once",
                {"drain": self.drain_fraction, "margin": self.baseline_margin},
            )
        if not timedelta(0) <= self.ready_timeout <= timedelta(hours=2):
            raise PydanticCustomError("ready_timeout", "ready_timeout must be between 0s and 2h")
        for collective, floor in self.min_busbw.items():
            if not 0 < floor < 1e6:  # also refuses .nan and .inf
                raise PydanticCustomError(
                    "floor",
                    "min_busbw.{c} must be a positive GB/s figure below 1000000",
                    {"c": collective.value},
                )
        return self


# --------------------------------------------------------------------------------------------------
# Scheduler


class SchedulerKind(StrEnum):
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


# A Kubernetes namespace or object name (RFC 1123 label; kubernetes.io "Object Names and IDs").
K8sName = Annotated[
    str,
    _pattern(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        "expected 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit "
        "(a Kubernetes name), e.g. gpufleet",
    ),
]
# A container image reference with a tag or a digest (the OCI distribution spec's reference grammar, in
# short): gpufleet pins no image of its own, so the one the user names must say which build it is.
OciImage = Annotated[
    str,
    _pattern(
        r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
        r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64})$",
        "expected an image reference with a tag or a digest, such as "
        "public.ecr.aws/hpc-cloud/nccl-tests:latest or registry.example.com/team/nccl-tests@sha256:<64 hex>",
    ),
]
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class KubernetesOptions(SpecModel):
    """How the validation's pods and MPIJobs run on a Kubernetes cluster (docs/kubernetes.md)."""

    image: OciImage = Field(
        description="the image every pod runs: nccl-tests under nccl_tests_dir, Open MPI's mpirun, sshd, "
        "python3 (and torchrun for the training check), with the fabric's NCCL plugin (EFA: aws-ofi-nccl)",
    )
    namespace: K8sName = Field(
        default="default", description="the namespace the pods and MPIJobs go to (it must exist)"
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="labels that pick the nodes to validate; default: node.kubernetes.io/instance-type set "
        "to the compute group's instance_type",
    )
    job_api: Literal["mpijob"] = Field(
        default="mpijob",
        description="the job API of the collectives and the training check: the MPI "
        "Operator's kubeflow.org/v2beta1 MPIJob",
    )
    nccl_tests_dir: AbsolutePath = Field(
        default="/opt/nccl-tests/build", description="where the image keeps the nccl-tests binaries"
    )
    shared_volume: K8sName | None = Field(
        default=None,
        description="a ReadWriteMany PersistentVolumeClaim in the namespace, mounted on every worker at "
        "/gpufleet-shared: where the training check writes its checkpoint (needed for validation.training)",
    )

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _LABEL_KEY.match(key):
                raise PydanticCustomError(
                    "label_key",
                    "node_selector key '{key}' is not a Kubernetes label key ([prefix/]name, name 1-63 "
                    "characters of letters, digits, '-', '_' and '.'), e.g. node.kubernetes.io/instance-type",
                    {"key": key},
                )
            if not _LABEL_VALUE.match(str(item)):
                raise PydanticCustomError(
                    "label_value",
                    "node_selector '{key}': '{value}' is not a Kubernetes label value (at most 63 letters, "
                    "digits, '-', '_' and '.', starting and ending with a letter or digit)",
                    {"key": key, "value": item},
                )
        return value


class SchedulerSpec(SpecModel):
    """What runs the validation's jobs: Slurm (gpufleet configures it) or Kubernetes (the cluster's own)."""

    kind: SchedulerKind = Field(default=SchedulerKind.SLURM, description="slurm or kubernetes")
    kubernetes: KubernetesOptions | None = Field(
        default=None, description="kind kubernetes: the image, namespace and nodes of the validation's pods"
    )

    @model_validator(mode="after")
    def _options_match_kind(self) -> SchedulerSpec:
        if self.kind is SchedulerKind.KUBERNETES and self.kubernetes is None:
            raise PydanticCustomError(
                "kubernetes_options",
                "scheduler kubernetes needs its options, at least the image the pods run: {fix}",
                {"fix": "kubernetes: {image: <registry>/<nccl-tests image>:<tag>}", "at": "kubernetes"},
            )
        if self.kind is SchedulerKind.SLURM and self.kubernetes is not None:
            raise PydanticCustomError(
                "kubernetes_unused",
                "scheduler.kubernetes is read only with kind: kubernetes; set kind: kubernetes or drop it",
                {"at": "kubernetes"},
            )
        return self


# --------------------------------------------------------------------------------------------------
# The cluster


_TAG_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_TAG_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


class ClusterSpec(SpecModel):
    """A whole cluster: where, what, how it is wired, what it runs, who reaches it, how long it lives."""

    name: ClusterName = Field(description="the cluster's name, part of every host and resource name")
    provider: Annotated[
        Provider, Field(description="where: local, aws, gcp, azure, baremetal or kubernetes (by 'kind')")
    ]
    scheduler: SchedulerSpec = Field(
        default=SchedulerSpec(), description="what runs the jobs: slurm (default) or kubernetes (by 'kind')"
    )
    node_groups: list[NodeGroup] = Field(
        min_length=1,
        description="slurm: one controller group (count 1) and at least one compute group; kubernetes: the "
        "compute groups to validate",
    )
    fabric: Fabric = Field(default=Fabric(), description="'efa' is short for {kind: efa}")
    filesystem: Filesystem = Field(default=NoFilesystem(), description="a shared filesystem, by 'kind'")
    software: Software = Field(default=Software(), description="versions the roles install")
    access: Access = Field(default=Access(), description="who may reach the cluster")
    lifetime: Lifetime = Field(default=Lifetime(), description="when the cluster expires")
    tags: dict[str, str] = Field(
        default_factory=dict, description="extra tags (AWS, Azure) / labels (GCP) on every resource"
    )
    validation: ValidationSpec = Field(default=ValidationSpec(), description="what 'gpufleet validate' runs")
    checkpoint: CheckpointPlan | None = Field(
        default=None,
        description="the training jobs' checkpoints, sized by 'gpufleet check' (docs/training.md)",
    )

    _shorthand_provider = field_validator("provider", mode="before")(_kind_shorthand)
    _shorthand_scheduler = field_validator("scheduler", mode="before")(_kind_shorthand)
    _shorthand_fabric = field_validator("fabric", mode="before")(_kind_shorthand)
    _shorthand_fs = field_validator("filesystem", mode="before")(_kind_shorthand)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not _TAG_KEY.match(key) or key.startswith(("gpufleet", "aws", "goog")):
                raise PydanticCustomError(
                    "tag_key",
                    "tag key '{key}' must be 1-63 characters of a-z, 0-9, '_' or '-', start with a "
                    "letter (so it is valid as an AWS tag and a GCP label), and not start with "
                    "'gpufleet', 'aws' or 'goog'",
                    {"key": key},
                )
            if not _TAG_VALUE.match(str(item)):
                raise PydanticCustomError(
                    "tag_value",
                    "tag '{key}': value '{value}' must be at most 63 characters of a-z, 0-9, '_' or '-'",
                    {"key": key, "value": item},
                )
        return value

    @model_validator(mode="after")
    def _cluster_shape(self) -> ClusterSpec:
        names = [group.name for group in self.node_groups]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise PydanticCustomError(
                "group_names",
                "node group names must be unique; repeated: {names}",
                {"names": ", ".join(repeated)},
            )
        controllers = [g.name for g in self.node_groups if Role.CONTROLLER in g.roles]
        if self.provider.kind == "kubernetes" or self.scheduler.kind is SchedulerKind.KUBERNETES:
            self._kubernetes_shape(controllers)
        elif len(controllers) != 1:
            raise PydanticCustomError(
                "controller_groups",
                "exactly one node group must have the controller role (found {n}: {names})",
                {"n": len(controllers), "names": ", ".join(controllers) or "none"},
            )
        if not any(Role.COMPUTE in g.roles for g in self.node_groups):
            raise PydanticCustomError(
                "no_compute", "no node group has the compute role; add one with roles: [compute]"
            )
        kind = self.provider.kind
        allowed = FILESYSTEMS_BY_PROVIDER[kind]
        if self.filesystem.kind not in allowed:
            raise PydanticCustomError(
                "filesystem_provider",
                "filesystem kind '{fs}' is not available with provider '{p}'; use one of: {allowed}",
                {
                    "fs": self.filesystem.kind,
                    "p": kind,
                    "allowed": ", ".join(allowed),
                    "at": "filesystem.kind",
                },
            )
        if kind == "local":
            if self.fabric.kind is not FabricKind.ETHERNET:
                raise PydanticCustomError(
                    "local_fabric",
                    "the local backend has no '{f}' fabric; set fabric: ethernet",
                    {"f": self.fabric.kind.value, "at": "fabric.kind"},
                )
            for index, group in enumerate(self.node_groups):
                if group.instance_type != "local":
                    raise PydanticCustomError(
                        "local_instance_type",
                        "the local backend runs containers: set instance_type: local",
                        {"at": f"node_groups.{index}.instance_type"},
                    )
        if kind in ("local", "baremetal"):
            for index, group in enumerate(self.node_groups):
                if group.capacity.mode is not CapacityMode.ON_DEMAND:
                    raise PydanticCustomError(
                        "capacity_provider",
                        "capacity mode '{mode}' applies to clouds only; drop capacity or use on_demand",
                        {"mode": group.capacity.mode.value, "at": f"node_groups.{index}.capacity.mode"},
                    )
        if self.validation.training.enabled and self.scheduler.kind is SchedulerKind.SLURM:
            if self.software.pytorch is None:
                raise PydanticCustomError(
                    "training_needs_pytorch",
                    "validation.training needs PyTorch on the compute nodes: set software.pytorch "
                    "(e.g. 2.13.0)",
                    {"at": "software.pytorch"},
                )
            if self.filesystem.kind == "none":
                raise PydanticCustomError(
                    "training_needs_filesystem",
                    "validation.training writes its checkpoint to the shared filesystem: add a filesystem "
                    "(local: kind: volume), or set validation.training.enabled: false",
                    {"at": "filesystem.kind"},
                )
        return self

    def _kubernetes_shape(self, controllers: list[str]) -> None:
        """A Kubernetes cluster handed over: provider and scheduler both kubernetes, no Slurm controller, a
        fabric whose pods need no vendor sidecar, the image in scheduler.kubernetes."""
        if self.provider.kind != "kubernetes":
            raise PydanticCustomError(
                "kubernetes_provider",
                "scheduler kubernetes runs on a Kubernetes cluster you hand over; gpufleet does not make "
                "one on '{p}' yet: set {fix}",
                {
                    "p": self.provider.kind,
                    "fix": "provider: {kind: kubernetes, kubeconfig: ~/.kube/config, context: <name>}",
                    "at": "provider.kind",
                },
            )
        if self.scheduler.kind is not SchedulerKind.KUBERNETES:
            raise PydanticCustomError(
                "kubernetes_scheduler",
                "provider kubernetes runs jobs as pods, not through Slurm: set {fix}",
                {
                    "fix": "scheduler: {kind: kubernetes, kubernetes: {image: <nccl-tests image>:<tag>}}",
                    "at": "scheduler.kind",
                },
            )
        if controllers:
            index = next(i for i, g in enumerate(self.node_groups) if g.name == controllers[0])
            raise PydanticCustomError(
                "kubernetes_controller",
                "a Kubernetes cluster has no Slurm controller to make: drop the group '{g}' and list only "
                "the compute nodes to validate",
                {"g": controllers[0], "at": f"node_groups.{index}.roles"},
            )
        if self.fabric.kind in (FabricKind.TCPX, FabricKind.TCPXO):
            raise PydanticCustomError(
                "kubernetes_fabric",
                "fabric '{f}' needs Google's receive-datapath manager beside every NCCL process, which "
                "gpufleet's pods do not run yet on Kubernetes: validate it with scheduler slurm on gcp",
                {"f": self.fabric.kind.value, "at": "fabric.kind"},
            )
        if self.software.container_image is not None:
            raise PydanticCustomError(
                "kubernetes_container_image",
                "on Kubernetes every pod runs scheduler.kubernetes.image; software.container_image (an "
                "enroot image for Slurm's pyxis) is not read: drop it",
                {"at": "software.container_image"},
            )
        options = self.scheduler.kubernetes
        if self.validation.training.enabled and (options is None or options.shared_volume is None):
            raise PydanticCustomError(
                "training_needs_volume",
                "validation.training writes its checkpoint to a volume every worker shares: set "
                "scheduler.kubernetes.shared_volume to a ReadWriteMany PersistentVolumeClaim, or set "
                "validation.training.enabled: false",
                {"at": "scheduler.kubernetes.shared_volume"},
            )

    # ---- derived views used by every later stage ------------------------------------------------

    @property
    def controller_group(self) -> NodeGroup:
        return next(g for g in self.node_groups if Role.CONTROLLER in g.roles)

    @property
    def compute_groups(self) -> list[NodeGroup]:
        return [g for g in self.node_groups if Role.COMPUTE in g.roles]

    @property
    def login_groups(self) -> list[NodeGroup]:
        """Groups with the login role; when none has it, the controller serves as the login node."""
        explicit = [g for g in self.node_groups if Role.LOGIN in g.roles]
        return explicit or [self.controller_group]

    @property
    def compute_count(self) -> int:
        return sum(g.count for g in self.compute_groups)

    def host_names(self, group: NodeGroup) -> list[str]:
        """Stable host names of a group's nodes: ``<cluster>-<group>`` or ``<cluster>-<group>-<i>``."""
        base = f"{self.name}-{group.name}"
        if group.count == 1 and Role.COMPUTE not in group.roles:
            return [base]
        width = max(1, len(str(group.count - 1)))
        return [f"{base}-{index:0{width}d}" for index in range(group.count)]
