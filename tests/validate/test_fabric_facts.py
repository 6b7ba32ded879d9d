"""The fabric parsers on real outputs (tests/validate/data/fabric/SOURCES.md says where each comes from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.validate.fabric_facts import (
    IbPort,
    Link,
    efa_problems,
    nic_problems,
    parse_fi_info,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_ip_link,
    port_problems,
)

DATA = Path(__file__).parent / "data" / "fabric"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_fi_info_counts_efa_rdm_devices_only():
    # one EFA device: its RDM domain counts; its datagram domain and the efa;ofi_rxd layer over it do not
    assert parse_fi_info(read("fi_info-efa-libfabric-5689.txt")) == ["efa_0"]


def test_fi_info_against_the_catalog_count():
    devices = parse_fi_info(read("fi_info-efa-libfabric-5689.txt"))
    assert efa_problems(devices, 1) == []
    assert efa_problems(devices, 32) == ["fi_info -p efa lists 1 EFA device(s) (efa_0), the catalog says 32"]
    assert parse_fi_info("fi_getinfo: -61\n") == []


def test_ibstat_ndr_port_after_a_pasted_command_line():
    assert parse_ibstat(read("ibstat-nccl-1591-h100-ndr.txt")) == [
        IbPort("mlx5_5", 1, "Active", "InfiniBand", rate_gbps=400)
    ]


def test_ibstat_roce_ports():
    ports = parse_ibstat(read("ibstat-l2fwd-nv-6-roce.txt"))
    assert ports == [
        IbPort("mlx5_0", 1, "Active", "Ethernet", rate_gbps=100),
        IbPort("mlx5_1", 1, "Active", "Ethernet", rate_gbps=100),
    ]
    assert port_problems(ports, expected=2, link_layer="Ethernet", rate_gbps=100) == []
    assert port_problems(ports, expected=2, link_layer="InfiniBand", rate_gbps=None) == [
        "0 InfiniBand port(s), the inventory expects 2"
    ]


def test_ibstat_with_tabs_elisions_and_an_ibpanic_line():
    assert parse_ibstat(read("ibstat-gpud-752-ibpanic.txt")) == [
        IbPort("mlx5_7", 1, "Active", "InfiniBand", rate_gbps=200)
    ]


def test_ibstat_down_port_and_a_record_cut_off():
    ports = parse_ibstat(read("ibstat-nccl-tests-128-down-port.txt"))
    assert [(p.device, p.state, p.rate_gbps, p.link_layer) for p in ports] == [
        ("mlx5_0", "Active", 200, "InfiniBand"),
        ("mlx5_1", "Down", 10, "InfiniBand"),
        ("mlx5_2", "Active", None, None),  # the paste ends before its rate and link layer
    ]
    assert port_problems(ports, expected=2, link_layer="InfiniBand", rate_gbps=200) == ["mlx5_1/1 is Down"]


def test_ibstat_wrong_rate():
    ports = parse_ibstat(read("ibstat-l2fwd-nv-6-roce.txt"))
    assert port_problems(ports, expected=2, link_layer="Ethernet", rate_gbps=400) == [
        "mlx5_0/1 runs at 100 Gb/s, expected 400",
        "mlx5_1/1 runs at 100 Gb/s, expected 400",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # starts in the middle of a port record (skipped), then a full RoCE port, then a cut-off device
        ("ibv_devinfo-deepep-38-roce.txt", [IbPort("mlx5_2", 1, "Active", "Ethernet", active_mtu=4096)]),
        ("ibv_devinfo-deepep-60-down.txt", [IbPort("mlx5_12", 1, "Down", "Ethernet", active_mtu=1024)]),
        ("ibv_devinfo-deepep-55-ib.txt", [IbPort("mlx5_3", 1, "Active", "InfiniBand", active_mtu=4096)]),
    ],
)
def test_ibv_devinfo(name, expected):
    assert parse_ibv_devinfo(read(name)) == expected


def test_ip_link_json_of_a_local_node():
    links = parse_ip_link(read("ip-j-link-local-podman-node.json"))
    assert links == {"lo": Link("lo", 65536, True), "eth0": Link("eth0", 1500, True)}
    assert nic_problems(links, ["eth0"], 1500) == []
    assert nic_problems(links, ["eth0", "enp6s0"], 8244) == [
        "eth0 has MTU 1500, expected 8244",
        "enp6s0 is missing",
    ]


def test_ip_link_rejects_text_output():
    with pytest.raises(ValueError, match="not the JSON of 'ip -j link show'"):
        parse_ip_link("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\n")
