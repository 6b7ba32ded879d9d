"""Network interfaces of every AWS type in the catalog, as AWS documents them for several network cards.

The expectation is written here from the page (EFA_LAYOUT_DOC), not computed by the code under test:
ENA primary on card 0 / device 0; EFA-only on card 0 / device 1; EFA-only on device 0 of every further
card, one per card, as many as the catalog's EFA count. Where card 0 takes no EFA (P6-B300, the catalog's
``efa_first_card: 1``), the EFA-only interfaces sit on device 0 of cards 1, 2, ... and card 0 holds the
ENA primary alone. Types whose catalog entry marks figures unknown are refused, not planned.
"""

from __future__ import annotations

import pytest
from aws_specs import aws_spec

from gpufleet.catalog import load_catalog
from gpufleet.catalog.aws_interfaces import interface_layout

LT = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_TYPES = sorted((i for i in load_catalog().for_provider("aws") if not i.unknown), key=lambda i: i.name)


def expected_slots(efa: int, efa_only: bool, first_card: int = 0) -> list[tuple[int, int, str]]:
    if efa == 0:
        return [(0, 0, "interface")]
    if first_card == 1:
        return [(0, 0, "interface")] + [(card, 0, "efa-only") for card in range(1, efa + 1)]
    if efa_only:
        return [(0, 0, "interface"), (0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, efa)]
    return [(0, 0, "efa")] + [(card, 1, "efa") for card in range(1, efa)]


def slots_of(resource) -> list[tuple[int, int, str]]:
    return [
        (int(n["networkCardIndex"]), int(n["deviceIndex"]), n["interfaceType"])
        for n in resource.inputs["networkInterfaces"]
    ]


@pytest.mark.parametrize("item", AWS_TYPES, ids=[i.name for i in AWS_TYPES])
def test_launch_template_interfaces_for_every_aws_type(plan_aws, item):
    efa = item.fabric.kind.value == "efa"
    # A region that sells the type (the catalog's regions; us-east-1 where it does).
    region = "us-east-1" if not item.regions or "us-east-1" in item.regions else item.regions[-1]
    provider = {"kind": "aws", "region": region, "zone": f"{region}a"}
    spec = aws_spec(gpu={"instance_type": item.name}, fabric="efa" if efa else "ethernet", provider=provider)
    recorded = plan_aws(spec)
    template = recorded.one(LT, "fleet-gpu-lt")
    count = item.fabric.interfaces if efa else 0
    first = item.fabric.efa_first_card or 0
    want = expected_slots(count, bool(item.fabric.efa_only_supported), first)
    got = slots_of(template)
    assert got == want, f"{template.urn}: interfaces {got}, AWS's layout for {item.name} is {want}"
    efa_slots = [s for s in got if s[2] in ("efa", "efa-only")]
    assert len(efa_slots) == count, f"{template.urn}: {len(efa_slots)} EFA interfaces, catalog says {count}"
    if count:
        cards = sorted({card for card, _, kind in efa_slots})
        assert cards == list(range(first, first + count)), f"{template.urn}: EFA on cards {cards}"
        assert count <= (item.fabric.network_cards or 1), f"{item.name}: more EFA than network cards"
    for nic in template.inputs["networkInterfaces"]:
        assert nic.get("associatePublicIpAddress") in (None, "false"), f"{template.urn}: public IP on {nic}"
        assert nic["securityGroups"], f"{template.urn}: interface without security group: {nic}"
    hosts = {h["name"]: h for h in recorded.outputs["hosts"]}
    assert hosts["fleet-gpu-0"]["fabric_interfaces"] == count, hosts["fleet-gpu-0"]


def test_head_node_has_one_plain_ena_interface(plan_aws):
    recorded = plan_aws(aws_spec())
    template = recorded.one(LT, "fleet-head-lt")
    assert slots_of(template) == [(0, 0, "interface")], f"{template.urn}: {slots_of(template)}"
    assert template.inputs["networkInterfaces"][0]["associatePublicIpAddress"] == "false", template.urn


def test_fewer_efa_interfaces_use_the_first_cards(plan_aws):
    recorded = plan_aws(aws_spec(fabric={"kind": "efa", "interfaces": 4}))
    template = recorded.one(LT, "fleet-gpu-lt")
    assert slots_of(template) == expected_slots(4, True), f"{template.urn}: {slots_of(template)}"


def test_more_efa_than_network_cards_is_refused():
    with pytest.raises(ValueError, match="one EFA interface per network card"):
        interface_layout(33, 32, True)


def test_p5_layout_matches_the_doc_example():
    """The page's run-instances example: 32 EFA devices and one ENA device on a p5.48xlarge."""
    slots = interface_layout(32, 32, True)
    assert len(slots) == 33
    assert sum(s.interface_type == "efa-only" for s in slots) == 32
    assert slots[0].interface_type == "interface"


def test_p6_b300_card_zero_is_ena_only():
    """P6-B300: 17 network cards, card 0 ENA-only, one EFA-only interface on each of cards 1-16."""
    item = load_catalog().get("p6-b300.48xlarge")
    assert item is not None and item.fabric.efa_first_card == 1
    slots = interface_layout(16, 17, True, first_card=1)
    assert [(s.network_card_index, s.device_index, s.interface_type) for s in slots[:2]] == [
        (0, 0, "interface"),
        (1, 0, "efa-only"),
    ]
    assert [s.network_card_index for s in slots if s.is_efa] == list(range(1, 17))
    with pytest.raises(ValueError, match="16 EFA-capable network card"):
        interface_layout(17, 17, True, first_card=1)


def test_type_with_unknown_figures_is_refused_before_planning(plan_aws):
    from gpufleet.errors import SpecError

    with pytest.raises(SpecError, match=r"cannot plan p6e-gb200\.36xlarge.*fabric\.interfaces"):
        plan_aws(aws_spec(gpu={"instance_type": "p6e-gb200.36xlarge", "count": 18}))
