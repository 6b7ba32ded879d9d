"""The shipped instance catalog: it loads, it is complete, every figure is sourced, and the fabric facts hold.

``Catalog.baseline()`` is tested on a small catalog built here, so its rules are pinned independently of
which published results the real data happens to carry.
"""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from gpufleet.catalog import Catalog, FabricInfo, Gpu, InstanceType, load_catalog
from gpufleet.catalog.model import SOURCED_FIGURES
from gpufleet.spec.model import FabricKind

AWS_GPU = (
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "g5.xlarge",
    "g5.48xlarge",
)
AWS_HEAD = ("m7i.xlarge", "m7i.2xlarge", "c7i.4xlarge")
GCP_GPU = (
    "a2-highgpu-8g",
    "a2-ultragpu-8g",
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "a4-highgpu-8g",
)
GCP_HEAD = ("n2-standard-4", "n2-standard-8", "c3-standard-8")
BAREMETAL = ("dgx-h100", "dgx-a100")
GPU_TYPES = AWS_GPU + GCP_GPU + BAREMETAL
REQUIRED = (*GPU_TYPES, *AWS_HEAD, *GCP_HEAD, "local")

CATALOG = load_catalog()


def _types(pred) -> list[str]:
    return [name for name, item in CATALOG.instance_types.items() if pred(item)]


def _provider(name: str) -> str:
    if name in AWS_GPU + AWS_HEAD:
        return "aws"
    if name in GCP_GPU + GCP_HEAD:
        return "gcp"
    return "baremetal" if name in BAREMETAL else "local"


def _present_figures(item: InstanceType) -> list[str]:
    """The sourced figures this type has a value for (regions only when listed)."""
    values = {
        "cpus": item.cpus,
        "memory_gib": item.memory_gib,
        "gpu": item.gpu,
        "fabric": item.fabric,
        "price_per_hour_usd": item.price_per_hour_usd,
        "regions": item.regions or item.zones or None,
        "cpu_arch": item.cpu_arch if item.cpu_arch != "x86_64" else None,
    }
    return [figure for figure in SOURCED_FIGURES if values[figure] is not None]


# -- loading and presence ------------------------------------------------------------------------


def test_yaml_loads_and_validates():
    assert CATALOG.instance_types, "the shipped catalog has no instance types"
    assert load_catalog() is CATALOG, "load_catalog() should parse the YAML once per process"


@pytest.mark.parametrize("name", REQUIRED)
def test_required_type_present(name):
    item = CATALOG.get(name)
    assert item is not None, f"{name} is missing from instances.yaml"
    assert item.name == name
    assert item.provider == _provider(name), f"{name}: provider {item.provider}, want {_provider(name)}"


# -- completeness and sources --------------------------------------------------------------------


@pytest.mark.parametrize("name", GPU_TYPES)
def test_gpu_type_complete(name):
    item = CATALOG.instance_types[name]
    assert item.gpu is not None, f"{name}: no gpu"
    assert item.cpus is not None, f"{name}: no cpus"
    assert item.memory_gib is not None, f"{name}: no memory_gib"
    assert item.fabric.bandwidth_gbps > 0, f"{name}: no fabric bandwidth"


@pytest.mark.parametrize("name", AWS_HEAD + GCP_HEAD)
def test_head_node_type_complete(name):
    item = CATALOG.instance_types[name]
    assert item.gpu is None, f"{name} is a head-node type but has a GPU"
    assert item.cpus and item.memory_gib, f"{name}: cpus {item.cpus}, memory_gib {item.memory_gib}"
    assert item.fabric.kind is FabricKind.ETHERNET and item.fabric.interfaces == 0


@pytest.mark.parametrize("name", sorted(CATALOG.instance_types))
def test_every_present_figure_names_a_source(name):
    item = CATALOG.instance_types[name]
    missing = [figure for figure in _present_figures(item) if figure not in item.sources]
    assert not missing, f"{name}: figures without a source id: {missing}"


@pytest.mark.parametrize("name", sorted(CATALOG.instance_types))
def test_source_keys_name_real_figures(name):
    """A key is a sourced figure or a dotted field of one (``fabric.mtu``); a typo would cite nothing."""
    item = CATALOG.instance_types[name]
    parts = {"fabric": FabricInfo.model_fields, "gpu": Gpu.model_fields}
    for key in item.sources:
        head, _, field = key.partition(".")
        if not field:
            assert key in SOURCED_FIGURES, f"{name}: sources.{key} is not one of {SOURCED_FIGURES}"
        else:
            assert head in parts and field in parts[head], f"{name}: sources.{key} names no field"
            assert getattr(getattr(item, head), field) is not None, f"{name}: sources.{key} cites a null"


@pytest.mark.parametrize("name", sorted(CATALOG.instance_types))
def test_sources_resolve_to_https_pages(name):
    item = CATALOG.instance_types[name]
    cited = [*item.sources.values(), *(b.source for b in item.baselines)]
    for source_id in cited:
        source = CATALOG.sources.get(source_id)
        assert source is not None, f"{name}: source id '{source_id}' is not in the sources table"
        if item.provider == "local":
            continue  # the local backend is described by a doc of ours, not a public page
        assert source.url.startswith("https://"), f"{name}: source '{source_id}' has no https URL"


def test_unknown_source_id_is_rejected():
    data = yaml.safe_load(
        """
        sources: {}
        instance_types:
          x: {provider: aws, description: d, fabric: {kind: ethernet, bandwidth_gbps: 1, interfaces: 0},
              sources: {fabric: nowhere}}
        """
    )
    with pytest.raises(ValidationError, match="unknown source 'nowhere'"):
        Catalog.model_validate(data)


# -- fabric invariants ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", _types(lambda t: t.fabric.kind is FabricKind.EFA))
def test_efa_types_have_interfaces_and_cards(name):
    fabric = CATALOG.instance_types[name].fabric
    assert fabric.interfaces >= 1, f"{name}: EFA type with {fabric.interfaces} EFA interfaces"
    assert fabric.network_cards is not None, f"{name}: EFA type without network_cards"
    assert fabric.interfaces <= fabric.network_cards, f"{name}: AWS allows one EFA per network card"
    assert fabric.efa_only_supported is not None, f"{name}: efa_only_supported unknown"


@pytest.mark.parametrize("name", GCP_GPU)
def test_gcp_gpu_nic_layout(name):
    fabric = CATALOG.instance_types[name].fabric
    assert fabric.host_nics is not None and fabric.host_nics >= 1, f"{name}: host_nics {fabric.host_nics}"
    if fabric.interfaces > 0:
        assert fabric.gpu_nic_type is not None, f"{name}: {fabric.interfaces} GPU NICs but no gpu_nic_type"
        assert fabric.mtu is not None, f"{name}: GPU NIC VPCs without an MTU"


GPUDIRECT_KINDS = (FabricKind.TCPX, FabricKind.TCPXO, FabricKind.ROCE)


@pytest.mark.parametrize("name", _types(lambda t: t.provider == "gcp" and t.fabric.kind in GPUDIRECT_KINDS))
def test_gcp_gpudirect_types_name_their_host_nics(name):
    """gcp_gpudirect exports NCCL_SOCKET_IFNAME from these names: none would export an empty value."""
    fabric = CATALOG.instance_types[name].fabric
    names = fabric.host_nic_names
    assert names, f"{name}: no host_nic_names, nccl.env would export NCCL_SOCKET_IFNAME=''"
    assert len(names) == fabric.host_nics, f"{name}: {names} for {fabric.host_nics} host NICs"
    assert "fabric.host_nic_names" in CATALOG.instance_types[name].sources, f"{name}: unsourced NIC names"


def test_a4_host_nics_are_the_toolkits():
    """Cluster Toolkit's A4 NCCL test sets NCCL_SOCKET_IFNAME=enp0s19,enp192s20."""
    assert CATALOG.instance_types["a4-highgpu-8g"].fabric.host_nic_names == ["enp0s19", "enp192s20"]


@pytest.mark.parametrize("name", _types(lambda t: t.fabric.kind is FabricKind.ROCE))
def test_roce_types_use_roce_profile_and_mrdma(name):
    fabric = CATALOG.instance_types[name].fabric
    assert fabric.network_profile == "roce", f"{name}: network_profile {fabric.network_profile}"
    assert fabric.gpu_nic_type == "MRDMA", f"{name}: gpu_nic_type {fabric.gpu_nic_type}"


@pytest.mark.parametrize("name", _types(lambda t: t.provider != "gcp"))
def test_gcp_only_fields_stay_off_other_providers(name):
    fabric = CATALOG.instance_types[name].fabric
    gcp_fields = {f: getattr(fabric, f) for f in ("host_nics", "gpu_nic_type", "mtu", "network_profile")}
    assert all(v is None for v in gcp_fields.values()), f"{name}: GCP-only fields set: {gcp_fields}"


@pytest.mark.parametrize(
    ("name", "interfaces"),
    [
        ("p4d.24xlarge", 4),
        ("p4de.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("p5e.48xlarge", 32),
        ("p5en.48xlarge", 16),
        ("p6-b200.48xlarge", 8),
        ("p6-b300.48xlarge", 16),
        ("g5.48xlarge", 1),
        ("g5.xlarge", 0),
        ("a3-highgpu-8g", 4),
        ("a3-megagpu-8g", 8),
        ("a3-ultragpu-8g", 8),
        ("a4-highgpu-8g", 8),
        ("a2-highgpu-8g", 0),
        ("a2-ultragpu-8g", 0),
    ],
)
def test_interface_counts(name, interfaces):
    assert CATALOG.instance_types[name].fabric.interfaces == interfaces


@pytest.mark.parametrize(
    ("name", "host_nics", "nic_type", "mtu", "kind"),
    [
        ("a3-highgpu-8g", 1, "GVNIC", 8244, FabricKind.TCPX),
        ("a3-megagpu-8g", 1, "GVNIC", 8244, FabricKind.TCPXO),
        ("a3-ultragpu-8g", 2, "MRDMA", 8896, FabricKind.ROCE),
        ("a4-highgpu-8g", 2, "MRDMA", 8896, FabricKind.ROCE),
        ("a2-highgpu-8g", 1, None, None, FabricKind.ETHERNET),
        ("a2-ultragpu-8g", 1, None, None, FabricKind.ETHERNET),
    ],
)
def test_gcp_nic_facts(name, host_nics, nic_type, mtu, kind):
    fabric = CATALOG.instance_types[name].fabric
    got = (fabric.host_nics, fabric.gpu_nic_type, fabric.mtu, fabric.kind)
    assert got == (host_nics, nic_type, mtu, kind), f"{name}: (host_nics, gpu_nic_type, mtu, kind) = {got}"


def test_g5_xlarge_has_no_efa():
    fabric = CATALOG.instance_types["g5.xlarge"].fabric
    assert fabric.kind is FabricKind.ETHERNET and fabric.interfaces == 0
    assert fabric.efa_only_supported is False


@pytest.mark.parametrize("name", BAREMETAL)
def test_dgx_is_infiniband(name):
    assert CATALOG.instance_types[name].fabric.kind is FabricKind.INFINIBAND


# -- prices and baselines ------------------------------------------------------------------------


@pytest.mark.parametrize("name", _types(lambda t: t.price_per_hour_usd is not None))
def test_prices_positive_with_region(name):
    item = CATALOG.instance_types[name]
    assert item.price_per_hour_usd > 0
    assert item.price_region, f"{name}: a price without the region it was read for"


def test_price_must_be_positive():
    with pytest.raises(ValidationError):
        InstanceType(
            name="x",
            provider="aws",
            description="d",
            fabric=FabricInfo(kind="ethernet", bandwidth_gbps=1, interfaces=0),
            price_per_hour_usd=0,
        )


@pytest.mark.parametrize(
    "baseline", [(n, b) for n, t in CATALOG.instance_types.items() for b in t.baselines], ids=str
)
def test_shipped_baselines_are_plausible(baseline):
    name, b = baseline
    item = CATALOG.instance_types[name]
    assert item.gpu is not None and b.nodes >= 2, f"{name}: a fabric baseline needs a GPU type and 2+ nodes"
    assert b.note, f"{name}: say which row of the published run the figure is (size, in/out of place)"


def test_published_baselines_carried():
    assert CATALOG.baseline("p5.48xlarge", 2, "all_reduce").busbw_gbps == 487.09
    assert CATALOG.baseline("p4de.24xlarge", 2, "all_reduce").busbw_gbps == 78.33
    assert CATALOG.baseline("p4d.24xlarge", 2, "all_reduce") is None, "p4d has no published result"


# -- Catalog.baseline() on a small catalog -------------------------------------------------------


def _baseline(nodes: int, busbw: float, size: int = 1 << 30, collective: str = "all_reduce") -> dict:
    return {
        "collective": collective,
        "nodes": nodes,
        "message_bytes": size,
        "busbw_gbps": busbw,
        "source": "s",
    }


SMALL = Catalog.model_validate(
    {
        "sources": {"s": {"title": "t", "url": "https://example.org/results", "retrieved": "2026-01-01"}},
        "instance_types": {
            "gpu8": {
                "provider": "aws",
                "description": "test type",
                "fabric": {"kind": "efa", "bandwidth_gbps": 3200, "interfaces": 32, "network_cards": 32},
                "baselines": [
                    _baseline(2, 300.0),
                    _baseline(2, 350.0, size=8 << 30),
                    _baseline(4, 280.0),
                    _baseline(16, 250.0),
                    _baseline(8, 150.0, collective="all_gather"),
                ],
            },
            "plain": {
                "provider": "aws",
                "description": "no baselines",
                "fabric": {"kind": "ethernet", "bandwidth_gbps": 10, "interfaces": 0},
            },
        },
    }
)


@pytest.mark.parametrize(
    ("nodes", "collective", "want"),
    [
        (4, "all_reduce", 280.0),  # same node count wins
        (2, "all_reduce", 350.0),  # same node count: the larger message wins
        (8, "all_reduce", 280.0),  # nearest count at or below (4), not the nearer 16 above
        (64, "all_reduce", 250.0),  # above every baseline: the largest one
        (1, "all_reduce", 350.0),  # below every baseline: nearest above (2), larger message
        (2, "all_gather", 150.0),  # only one all_gather baseline, at 8 nodes
        (16, "all_gather", 150.0),
        (4, "alltoall", None),  # no baseline for that collective
    ],
)
def test_baseline_selection(nodes, collective, want):
    got = SMALL.baseline("gpu8", nodes, collective)
    assert (got.busbw_gbps if got else None) == want, f"{nodes} nodes, {collective}: got {got}"


def test_baseline_unknown_or_bare_type():
    assert SMALL.baseline("nope", 2, "all_reduce") is None
    assert SMALL.baseline("plain", 2, "all_reduce") is None


# -- GPU architecture ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", _types(lambda item: item.gpu is not None))
def test_gpu_arch_is_sourced(name):
    """gpu.arch drives what nccl-tests is compiled for: it must cite NVIDIA's compute-capability table."""
    item = CATALOG.instance_types[name]
    assert item.sources.get("gpu.arch") == "nvidia-cuda-gpus", f"{name}: sources {item.sources}"


def test_one_gpu_model_has_one_arch():
    seen: dict[str, set[str]] = {}
    for item in CATALOG.instance_types.values():
        if item.gpu is not None:
            seen.setdefault(item.gpu.model, set()).add(item.gpu.arch)
    assert {model: archs for model, archs in seen.items() if len(archs) > 1} == {}
    assert seen["NVIDIA H100"] == {"sm_90"} and seen["NVIDIA A100"] == {"sm_80"}
    assert seen["NVIDIA B200"] == {"sm_100"} and seen["NVIDIA A10G"] == {"sm_86"}


# -- Blackwell Ultra, Grace Blackwell, CPU architecture, unknown figures --------------------------


@pytest.mark.parametrize("name", _types(lambda t: t.fabric.kind is FabricKind.EFA))
def test_efa_fits_the_cards_that_take_it(name):
    fabric = CATALOG.instance_types[name].fabric
    capable = (fabric.network_cards or 1) - (fabric.efa_first_card or 0)
    assert fabric.interfaces <= capable, f"{name}: {fabric.interfaces} EFA on {capable} EFA-capable cards"


def test_p6_b300_facts():
    item = CATALOG.instance_types["p6-b300.48xlarge"]
    assert item.gpu is not None and (item.gpu.model, item.gpu.arch, item.gpu.count) == (
        "NVIDIA B300",
        "sm_103",
        8,
    )
    assert (item.cpus, item.memory_gib, item.cpu_arch) == (192, 4096, "x86_64")
    fabric = item.fabric
    assert (fabric.bandwidth_gbps, fabric.interfaces, fabric.network_cards, fabric.efa_first_card) == (
        6400,
        16,
        17,
        1,
    )
    assert item.unknown == {} and item.baselines == [], "no published nccl-tests result was found for P6-B300"


def test_p6e_gb200_records_what_is_sourced_and_names_what_is_not():
    item = CATALOG.instance_types["p6e-gb200.36xlarge"]
    assert item.cpu_arch == "arm64" and item.sources.get("cpu_arch") == "aws-ena-express"
    assert item.gpu is not None and (item.gpu.arch, item.gpu.count) == ("sm_100", 4)
    assert set(item.unknown) == {"fabric.interfaces", "capacity"}, item.unknown
    assert all(len(why) > 40 for why in item.unknown.values()), "each unknown says why"
