"""The network interfaces of a node, laid out as AWS documents for instances with several network cards.

Pure layout (no cloud SDK); ``launch_template.py`` turns each slot into a launch template interface.
Creates nothing.

From "Maximize network bandwidth on Amazon EC2 instances with multiple network cards" (EFA_LAYOUT_DOC),
for types that take EFA-only interfaces (P5, P5e, P5en, P6-B200, ...):

- the primary interface is a plain ENA interface: network card 0, device index 0 (an EFA-only interface
  can never be the primary one);
- network card 0 also carries an EFA-only interface at device index 1;
- every further network card carries an EFA-only interface at device index 0.

On types whose network card 0 takes no EFA (P6-B300: card 0 is ENA-only, cards 1-16 carry EFA; the
catalog's ``fabric.efa_first_card: 1``), the page's rule "if the network card index 0 supports EFA" does
not apply: the primary ENA interface holds card 0 alone and the EFA-only interfaces start at card 1.

So a p5.48xlarge gets 1 ENA + 32 EFA-only interfaces, one EFA per network card, and one IP address
(EFA-only interfaces take none). Types without EFA-only support (P4d, P4de) follow the same page's
layout for EFA with ENA: an EFA interface as the primary (card 0, device 0), then an EFA interface at
device index 1 on each further card. No interface gets a public IP: AWS gives none to instances with
several network cards.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.catalog import InstanceType
from gpufleet.spec.model import ClusterSpec, FabricKind, NodeGroup, Role

EFA_LAYOUT_DOC = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"

ENA = "interface"
EFA = "efa"
EFA_ONLY = "efa-only"


@dataclass(frozen=True)
class InterfaceSlot:
    network_card_index: int
    device_index: int
    interface_type: str  # ENA ("interface"), EFA with ENA ("efa") or EFA-only ("efa-only")

    @property
    def is_efa(self) -> bool:
        return self.interface_type in (EFA, EFA_ONLY)


def efa_count(spec: ClusterSpec, group: NodeGroup, item: InstanceType | None) -> int:
    """EFA interfaces per node of ``group``: the spec's count, else the catalog's; 0 without EFA."""
    if Role.COMPUTE not in group.roles or spec.fabric.kind is not FabricKind.EFA:
        return 0
    if item is None or item.fabric.kind is not FabricKind.EFA:
        return 0
    return item.fabric.interfaces if spec.fabric.interfaces is None else spec.fabric.interfaces


def interface_layout(
    efa_interfaces: int, network_cards: int | None, efa_only: bool, first_card: int = 0
) -> list[InterfaceSlot]:
    """The slots for ``efa_interfaces`` EFA interfaces on a type with ``network_cards`` cards, the first
    of them able to take EFA being ``first_card``."""
    if efa_interfaces <= 0:
        return [InterfaceSlot(0, 0, ENA)]
    cards = network_cards or 1
    if efa_interfaces > cards - first_card:
        raise ValueError(
            f"{efa_interfaces} EFA interfaces asked on a type with {cards - first_card} EFA-capable network "
            "card(s); AWS documents one EFA interface per network card"
        )
    if first_card == 1:
        if not efa_only:
            raise ValueError("a type whose card 0 takes no EFA must take EFA-only interfaces on the others")
        slots = [InterfaceSlot(0, 0, ENA)]
        return slots + [InterfaceSlot(card, 0, EFA_ONLY) for card in range(1, efa_interfaces + 1)]
    if efa_only:
        slots = [InterfaceSlot(0, 0, ENA), InterfaceSlot(0, 1, EFA_ONLY)]
        slots += [InterfaceSlot(card, 0, EFA_ONLY) for card in range(1, efa_interfaces)]
        return slots
    slots = [InterfaceSlot(0, 0, EFA)]
    slots += [InterfaceSlot(card, 1, EFA) for card in range(1, efa_interfaces)]
    return slots


def group_layout(spec: ClusterSpec, group: NodeGroup, item: InstanceType | None) -> list[InterfaceSlot]:
    count = efa_count(spec, group, item)
    if count == 0 or item is None:
        return interface_layout(0, None, False)
    fabric = item.fabric
    return interface_layout(
        count, fabric.network_cards, bool(fabric.efa_only_supported), fabric.efa_first_card or 0
    )
