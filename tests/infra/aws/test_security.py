"""Security groups: EFA's self-referencing all-traffic rules, nothing open to the internet, Lustre ports."""

from __future__ import annotations

from aws_specs import aws_spec

SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"


def sg_id(recorded, name: str) -> str:
    from gpufleet.infra.plan import fake_id

    recorded.one(SG, name)
    return fake_id("sg-", name)


def rules_of(recorded, type_, group_id):
    return [r for r in recorded.of_type(type_) if r.inputs["securityGroupId"] == group_id]


def test_nodes_group_allows_all_traffic_to_and_from_itself(plan_aws):
    recorded = plan_aws(aws_spec())
    nodes = sg_id(recorded, "fleet-sg")
    for type_ in (INGRESS, EGRESS):
        selfish = [
            r
            for r in rules_of(recorded, type_, nodes)
            if r.inputs.get("referencedSecurityGroupId") == nodes and r.inputs["ipProtocol"] == "-1"
        ]
        assert len(selfish) == 1, f"{type_}: self all-traffic rules {[r.urn for r in selfish]}"
        assert "fromPort" not in selfish[0].inputs, selfish[0].urn


def test_no_ingress_from_the_internet(plan_aws):
    recorded = plan_aws(aws_spec())
    for rule in recorded.of_type(INGRESS):
        assert rule.inputs.get("cidrIpv4") != "0.0.0.0/0", f"{rule.urn} opens {rule.inputs}"
        assert rule.inputs.get("cidrIpv6") is None, rule.urn
        assert rule.inputs.get("referencedSecurityGroupId") or rule.inputs.get("cidrIpv4"), rule.urn
    for group in recorded.of_type(SG):
        assert not group.inputs.get("ingress"), f"{group.urn}: inline ingress {group.inputs.get('ingress')}"


def test_ssh_only_from_the_listed_cidrs(plan_aws):
    assert not [r for r in plan_aws(aws_spec()).of_type(INGRESS) if r.inputs.get("fromPort") == 22]
    recorded = plan_aws(aws_spec(access={"allowed_cidrs": ["203.0.113.0/24", "198.51.100.0/24"]}))
    ssh = [r for r in recorded.of_type(INGRESS) if r.inputs.get("fromPort") == 22]
    assert sorted(r.inputs["cidrIpv4"] for r in ssh) == ["198.51.100.0/24", "203.0.113.0/24"]
    for rule in ssh:
        assert (rule.inputs["ipProtocol"], rule.inputs["toPort"]) == ("tcp", 22), rule.urn


def test_egress_to_the_internet_is_https_and_http_only(plan_aws):
    recorded = plan_aws(aws_spec())
    out = [r for r in recorded.of_type(EGRESS) if r.inputs.get("cidrIpv4") == "0.0.0.0/0"]
    assert sorted((r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"]) for r in out) == [
        ("tcp", 80, 80),
        ("tcp", 443, 443),
    ], [r.urn for r in out]


def test_lustre_ports_between_nodes_and_file_system(plan_aws):
    fs = {"kind": "fsx_lustre", "size_gib": 1200}
    recorded = plan_aws(aws_spec(filesystem=fs))
    nodes, fsx = sg_id(recorded, "fleet-sg"), sg_id(recorded, "fleet-fsx-sg")
    ports = [(988, 988), (1018, 1023)]

    def ranges(type_, group, peer):
        return sorted(
            (int(r.inputs["fromPort"]), int(r.inputs["toPort"]))
            for r in rules_of(recorded, type_, group)
            if r.inputs.get("referencedSecurityGroupId") == peer and r.inputs["ipProtocol"] == "tcp"
        )

    assert ranges(INGRESS, fsx, nodes) == ports, "file system must accept Lustre from the nodes"
    assert ranges(INGRESS, fsx, fsx) == ports, "file servers must reach each other"
    assert ranges(EGRESS, nodes, fsx) == ports, "nodes must be allowed out to the file system"
    assert not [r for r in rules_of(recorded, INGRESS, fsx) if r.inputs.get("cidrIpv4")], "cidr on fsx sg"
    (lustre,) = recorded.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert lustre.inputs["securityGroupIds"] == [fsx], lustre.urn
