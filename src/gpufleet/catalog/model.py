"""The instance catalog: what each machine type has, what it costs, and what its fabric should deliver.

The data lives in ``instances.yaml`` beside this module. Every figure there names its source: each
instance type has a ``sources`` map (figure -> source id) and each baseline its own ``source``; the ids
resolve to entries of the top-level ``sources`` table (title, URL, date read).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.spec.model import Collective, FabricKind

Provider = Literal["aws", "gcp", "azure", "local", "baremetal"]

# Figures an instance type must source when it has them (a key of ``InstanceType.sources``); cpu_arch
# only when it is not the default x86_64.
SOURCED_FIGURES = ("cpus", "memory_gib", "gpu", "fabric", "price_per_hour_usd", "regions", "cpu_arch")


class CatalogModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(CatalogModel):
    title: str
    url: str = Field(pattern=r"^(https://\S+|docs/\S+)$", description="a public page, or a doc of ours")
    retrieved: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="date the figures were read")


class Gpu(CatalogModel):
    model: str
    arch: str = Field(
        pattern=r"^sm_\d{2,3}$",
        description="CUDA architecture, sm_<compute capability without the dot> (sm_90 for H100)",
    )
    count: int = Field(ge=1)
    memory_gib: int = Field(ge=1, description="memory per GPU")
    nvlink: bool
    nvswitch: bool


class FabricInfo(CatalogModel):
    """The node's inter-node network as its provider documents it."""

    kind: FabricKind
    bandwidth_gbps: float = Field(gt=0, description="per-node fabric bandwidth")
    gpu_fabric_gbps: float | None = Field(
        default=None,
        gt=0,
        description="the part of bandwidth_gbps on the GPU NICs, where the vendor's figure also counts the "
        "host NICs (GCP: 8 x 200 of A3 Mega's 1800); the physical bound of a collective is read from it",
    )
    interfaces: int = Field(
        ge=0, description="AWS: EFA interfaces to create; GCP: GPU NICs (one VPC each); else fabric ports"
    )
    network_cards: int | None = Field(default=None, ge=1, description="AWS: network cards on the type")
    efa_only_supported: bool | None = Field(default=None, description="AWS: EFA-only interfaces allowed")
    efa_first_card: int | None = Field(
        default=None,
        ge=0,
        le=1,
        description="AWS: the first network card that takes EFA (1 where card 0 is ENA-only, as on P6-B300)",
    )
    host_nics: int | None = Field(default=None, ge=1, description="GCP: gVNIC NICs for host traffic")
    gpu_nic_type: Literal["GVNIC", "MRDMA"] | None = Field(
        default=None, description="GCP: nic_type of GPU NICs"
    )
    mtu: int | None = Field(default=None, ge=1460, le=9216, description="GCP: MTU of the GPU NIC VPCs")
    network_profile: Literal["roce"] | None = Field(default=None, description="GCP: VPC network profile")
    gpudirect_rdma: bool | None = Field(
        default=None, description="the fabric reads and writes GPU memory directly (EFA RDMA, IB/RoCE)"
    )
    nic_names: list[str] = Field(
        default_factory=list, description="GCP: GPU NIC interface names on Google's images, in order"
    )
    host_nic_names: list[str] = Field(
        default_factory=list, description="GCP: host (gVNIC) interface names NCCL bootstraps over"
    )
    port_gbps: int | None = Field(default=None, ge=1, description="InfiniBand: rate of each fabric port")
    nvlink_domain_vms: int | None = Field(
        default=None,
        ge=2,
        description="VMs that share one multi-node NVLink domain (Azure ND GB200/GB300 v6: 18, a rack)",
    )


class Baseline(CatalogModel):
    """A published nccl-tests result that a healthy cluster of this type should reach."""

    collective: Collective
    nodes: int = Field(ge=1)
    message_bytes: int = Field(ge=1, description="message size the busbw was read at")
    busbw_gbps: float = Field(gt=0, description="bus bandwidth in GB/s, as nccl-tests prints it")
    source: str
    note: str | None = None
    # The vendor's own three tiers, where it publishes them (Microsoft's per-SKU baselines): below
    # ``warn_below_gbps`` re-test; below ``drain_below_gbps`` drain the node and report it to the cloud.
    warn_below_gbps: float | None = Field(default=None, gt=0, description="vendor's warn threshold")
    drain_below_gbps: float | None = Field(default=None, gt=0, description="vendor's drain threshold")
    path: Literal["all", "network"] = Field(
        default="all",
        description="'network': measured over the inter-node network alone (multi-node NVLink off, e.g. "
        "Azure GB300's inter-rack figure); such a baseline is recorded, not chosen by ``Catalog.baseline``",
    )
    placement: Literal["out-of-place", "in-place"] = Field(
        default="out-of-place", description="the half of the nccl-tests row the figure is"
    )
    nccl: str | None = Field(default=None, description="NCCL version of the published run, where given")
    plugin: str | None = Field(default=None, description="net plugin and version, where given")
    driver: str | None = Field(default=None, description="GPU driver version, where given")
    scheduler: str | None = Field(default=None, description="what launched the run (Slurm, GKE, ...)")
    provider_note: str | None = Field(
        default=None,
        description="set when the figure is another provider's run of the same hardware and fabric (a "
        "reference, not the vendor's own figure for this type)",
    )

    @model_validator(mode="after")
    def _tiers_ordered(self) -> Baseline:
        warn, drain = self.warn_below_gbps, self.drain_below_gbps
        if warn is not None and warn > self.busbw_gbps:
            raise ValueError(f"warn_below_gbps {warn} is above the expected {self.busbw_gbps}")
        if drain is not None and warn is not None and drain > warn:
            raise ValueError(f"drain_below_gbps {drain} is above warn_below_gbps {warn}")
        return self


class NodeFloor(CatalogModel):
    """A single-node figure a healthy node of the type reaches (the cloud's own node health check)."""

    collective: Collective
    gpus: int = Field(ge=1, description="the GPUs of one node the run spans")
    message_bytes: int = Field(ge=1)
    busbw_gbps: float = Field(gt=0, description="the floor: below it the node fails")
    source: str
    note: str | None = None


class FabricReference(CatalogModel):
    """Which published run sets the fraction of the bound a fabric kind is expected to reach, for a type
    with no baseline of its own (``gpufleet.validate.bound``)."""

    instance_type: str = Field(description="the catalog type whose baseline is the published run")
    collective: Collective
    nodes: int = Field(ge=2)
    note: str | None = None


class InstanceType(CatalogModel):
    name: str
    provider: Provider
    description: str
    cpus: int | None = Field(default=None, ge=1, description="vCPUs")
    memory_gib: float | None = Field(default=None, gt=0)
    gpu: Gpu | None = None
    fabric: FabricInfo
    price_per_hour_usd: float | None = Field(default=None, gt=0, description="on-demand, Linux")
    price_region: str | None = None
    cpu_arch: Literal["x86_64", "arm64"] = Field(
        default="x86_64", description="CPU architecture (what the machine image must be built for)"
    )
    regions: list[str] = Field(default_factory=list, description="regions (or zones) where offered")
    zones: list[str] = Field(default_factory=list, description="zones where offered, where known")
    sources: dict[str, str] = Field(default_factory=dict)
    baselines: list[Baseline] = Field(default_factory=list)
    node_floors: list[NodeFloor] = Field(
        default_factory=list, description="single-node NVLink floors the node check gates on"
    )
    unknown: dict[str, str] = Field(
        default_factory=dict,
        description="figures gpufleet needs that no public source settles (figure -> why); "
        "'gpufleet check' refuses the type and names them",
    )

    @property
    def gpu_fabric_gbps(self) -> float:
        """The node's GPU-fabric bandwidth in Gbit/s (B x 8): what the physical bound is read from."""
        return self.fabric.gpu_fabric_gbps or self.fabric.bandwidth_gbps

    @property
    def gpu_count(self) -> int:
        return self.gpu.count if self.gpu else 0


class Catalog(CatalogModel):
    sources: dict[str, Source]
    instance_types: dict[str, InstanceType]
    fabric_references: dict[FabricKind, FabricReference] = Field(
        default_factory=dict,
        description="per fabric kind, the published run whose fraction of the physical bound is the expected "
        "figure for a type of that fabric with no baseline of its own",
    )

    @model_validator(mode="before")
    @classmethod
    def _names_from_keys(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("instance_types"), dict):
            data = dict(data)
            data["instance_types"] = {
                key: {"name": key, **value} if isinstance(value, dict) else value
                for key, value in data["instance_types"].items()
            }
        return data

    @model_validator(mode="after")
    def _sources_resolve(self) -> Catalog:
        for name, item in self.instance_types.items():
            for figure, source in item.sources.items():
                if source not in self.sources:
                    raise ValueError(f"{name}: sources.{figure} names unknown source '{source}'")
            figures: list[Baseline | NodeFloor] = [*item.baselines, *item.node_floors]
            for baseline in figures:
                if baseline.source not in self.sources:
                    raise ValueError(f"{name}: a baseline names unknown source '{baseline.source}'")
        for kind, ref in self.fabric_references.items():
            named = self.instance_types.get(ref.instance_type)
            if named is None or not any(
                b.collective == ref.collective and b.nodes == ref.nodes for b in named.baselines
            ):
                raise ValueError(
                    f"fabric_references.{kind.value}: {ref.instance_type} has no {ref.collective.value} "
                    f"baseline at {ref.nodes} nodes"
                )
            if named.fabric.kind is not kind:
                raise ValueError(
                    f"fabric_references.{kind.value}: {ref.instance_type}'s fabric is "
                    f"{named.fabric.kind.value}"
                )
        return self

    def get(self, name: str) -> InstanceType | None:
        return self.instance_types.get(name)

    def for_provider(self, provider: str) -> list[InstanceType]:
        return [item for item in self.instance_types.values() if item.provider == provider]

    def reference_baseline(self, kind: FabricKind) -> tuple[InstanceType, Baseline] | None:
        """The published run ``fabric_references`` names for ``kind``, with its type."""
        ref = self.fabric_references.get(kind)
        if ref is None:
            return None
        item = self.instance_types[ref.instance_type]
        found = next(b for b in item.baselines if b.collective == ref.collective and b.nodes == ref.nodes)
        return item, found

    def baseline(self, instance_type: str, nodes: int, collective: str) -> Baseline | None:
        """The baseline for this type and collective at the node count closest to ``nodes``.

        A baseline at the same node count wins; otherwise the one with the nearest count at or below
        (busbw falls slowly with scale, so a smaller run's figure is the conservative stand-in), else
        the nearest above.
        """
        item = self.get(instance_type)
        if item is None:
            return None
        matches = [b for b in item.baselines if b.collective == collective and b.path == "all"]
        if not matches:
            return None
        at_or_below = [b for b in matches if b.nodes <= nodes]
        if at_or_below:
            return max(at_or_below, key=lambda b: (b.nodes, b.message_bytes))
        return min(matches, key=lambda b: (b.nodes, -b.message_bytes))


@cache
def load_catalog() -> Catalog:
    """The catalog shipped with gpufleet (parsed once per process)."""
    text = resources.files("gpufleet.catalog").joinpath("instances.yaml").read_text(encoding="utf-8")
    return Catalog.model_validate(yaml.safe_load(text))
