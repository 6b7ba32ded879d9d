"""Read what a node's fabric tools print, and compare it with the inventory's fabric facts.

Parsers (each tolerant of what people paste: a command line or ``...`` before the output, a record cut
off at the end, ``ibwarn``/``ibpanic`` noise between records):

- ``parse_fi_info``: ``fi_info -p efa [-t FI_EP_RDM]``, the EFA devices libfabric's ``efa`` provider offers
  a reliable-datagram (RDM) endpoint on; ``efa;ofi_rxd`` layered entries and datagram domains are not
  devices, and libfabric 2's ``efa-direct`` fabric names the same device again.
- ``parse_ibstat``: ``ibstat``, one ``IbPort`` per CA port with state, rate and link layer.
- ``parse_ibv_devinfo``: ``ibv_devinfo``, one ``IbPort`` per port with state, active MTU and link layer.
- ``parse_ip_link``: ``ip -j link show``, each interface's MTU and whether it is up.

Checks (``efa_problems``, ``port_problems``, ``nic_problems``) return what is wrong in words, empty when
the node matches the inventory; the validation's health step (``judge_health.py``) turns them into verdicts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_FI_INFO_FIELD = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(\S*)\s*$")


def parse_fi_info(text: str) -> list[str]:
    """EFA device names (``rdmap16s27``) with an RDM endpoint of the ``efa`` provider, in order."""
    devices: list[str] = []
    entry: dict[str, str] = {}

    def close() -> None:
        domain = entry.get("domain", "")
        if entry.get("provider") == "efa" and entry.get("type") == "FI_EP_RDM" and domain.endswith("-rdm"):
            name = domain[: -len("-rdm")]
            if name not in devices:
                devices.append(name)

    for line in text.splitlines():
        match = _FI_INFO_FIELD.match(line)
        if not match:
            continue
        key, value = match.groups()
        if key == "provider":
            close()
            entry = {}
        entry[key] = value
    close()
    return devices


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device (HCA), as ibstat or ibv_devinfo print it."""

    device: str
    port: int
    state: str  # "Active", "Down", "Init", ... (ibstat's words; ibv_devinfo's PORT_ACTIVE -> "Active")
    link_layer: str | None  # "InfiniBand" or "Ethernet" (RoCE)
    rate_gbps: int | None = None  # ibstat only
    active_mtu: int | None = None  # ibv_devinfo only

    @property
    def active(self) -> bool:
        return self.state == "Active"


_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")


def parse_ibstat(text: str) -> list[IbPort]:
    """Every CA port ``ibstat`` printed; a port whose record was cut off keeps what it had."""
    ports: list[IbPort] = []
    device: str | None = None
    port: dict[str, str] | None = None

    def close() -> None:
        if device is not None and port is not None and "State" in port:
            rate = port.get("Rate", "")
            ports.append(
                IbPort(
                    device=device,
                    port=int(port["port"]),
                    state=port["State"],
                    link_layer=port.get("Link layer"),
                    rate_gbps=int(rate) if rate.isdigit() else None,
                )
            )

    for line in text.splitlines():
        if match := _CA.match(line):
            close()
            device, port = match["name"], None
        elif match := _PORT.match(line):
            close()
            port = {"port": match["port"]}
        elif not line.startswith((" ", "\t")):
            close()  # noise between records (ibpanic, ibwarn, a shell prompt) ends the current one
            device, port = None, None
        elif port is not None and (match := _FIELD.match(line)):
            port[match["key"]] = match["value"]
    close()
    return ports


_HCA = re.compile(r"^hca_id:\s*(?P<name>\S+)\s*$")
_DEV_PORT = re.compile(r"^\s+port:\s*(?P<port>\d+)\s*$")
_DEV_FIELD = re.compile(r"^\s+(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*$")
_PORT_STATES = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Init", "PORT_ARMED": "Armed"}


def parse_ibv_devinfo(text: str) -> list[IbPort]:
    """Every port ``ibv_devinfo`` printed under an ``hca_id`` (lines before the first one are skipped)."""
    ports: list[IbPort] = []
    device: str | None = None
    port: dict[str, str] | None = None

    def close() -> None:
        if device is not None and port is not None and "state" in port:
            state = port["state"].split()[0]
            mtu = port.get("active_mtu", "").split()
            ports.append(
                IbPort(
                    device=device,
                    port=int(port["port"]),
                    state=_PORT_STATES.get(state, state),
                    link_layer=port.get("link_layer"),
                    active_mtu=int(mtu[0]) if mtu and mtu[0].isdigit() else None,
                )
            )

    for line in text.splitlines():
        if match := _HCA.match(line):
            close()
            device, port = match["name"], None
        elif match := _DEV_PORT.match(line):
            close()
            port = {"port": match["port"]}
        elif port is not None and (match := _DEV_FIELD.match(line)):
            port[match["key"]] = match["value"]
    close()
    return ports


@dataclass(frozen=True)
class Link:
    name: str
    mtu: int
    up: bool  # administratively up and with carrier (LOWER_UP)


def parse_ip_link(text: str) -> dict[str, Link]:
    """Interfaces from ``ip -j link show`` by name. Raises ``ValueError`` when the text is not its JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not the JSON of 'ip -j link show': {exc}") from None
    if not isinstance(data, list):
        raise ValueError("not the JSON of 'ip -j link show': expected a list of interfaces")
    links: dict[str, Link] = {}
    for item in data:
        if isinstance(item, dict) and "ifname" in item and "mtu" in item:
            flags = set(item.get("flags") or [])
            links[item["ifname"]] = Link(item["ifname"], int(item["mtu"]), {"UP", "LOWER_UP"} <= flags)
    return links


# ---- checks against the inventory ----------------------------------------------------------------


def efa_problems(devices: Sequence[str], expected: int) -> list[str]:
    if len(devices) == expected:
        return []
    shown = ", ".join(devices) or "none"
    return [f"fi_info -p efa lists {len(devices)} EFA device(s) ({shown}), the catalog says {expected}"]


def port_problems(
    ports: Iterable[IbPort], *, expected: int, link_layer: str, rate_gbps: int | None
) -> list[str]:
    """The fabric ports (those of ``link_layer``) must number ``expected``, all Active at ``rate_gbps``."""
    fabric = [port for port in ports if port.link_layer == link_layer]
    problems = []
    if len(fabric) != expected:
        problems.append(f"{len(fabric)} {link_layer} port(s), the inventory expects {expected}")
    for port in fabric:
        name = f"{port.device}/{port.port}"
        if not port.active:
            problems.append(f"{name} is {port.state}")
        elif rate_gbps and port.rate_gbps is not None and port.rate_gbps != rate_gbps:
            problems.append(f"{name} runs at {port.rate_gbps} Gb/s, expected {rate_gbps}")
    return problems


def nic_problems(links: dict[str, Link], names: Sequence[str], mtu: int | None) -> list[str]:
    """Each of ``names`` must exist, be up and (when ``mtu`` is given) have that MTU."""
    problems = []
    for name in names:
        link = links.get(name)
        if link is None:
            problems.append(f"{name} is missing")
        elif not link.up:
            problems.append(f"{name} is down")
        elif mtu and link.mtu != mtu:
            problems.append(f"{name} has MTU {link.mtu}, expected {mtu}")
    return problems
