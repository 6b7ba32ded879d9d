"""Who gets in: no root SSH login, Ansible as the image's user with become, SSH from outside to the login
node only."""

from __future__ import annotations

import yaml
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.backend import backend_for
from gpufleet.infra.program import plan_spec
from gpufleet.inventory.model import Inventory
from gpufleet.state import ClusterState

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
CIDRS = ["203.0.113.0/24"]


def test_user_data_keeps_root_logins_off(plan_aws):
    for instance in plan_aws(aws_spec()).of_type(INSTANCE):
        config = yaml.safe_load(instance.inputs["userData"].removeprefix("#cloud-config\n"))
        assert config["disable_root"] is True, f"{instance.urn}: {config}"


def test_ansible_connects_as_the_image_user_and_becomes_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    spec = aws_spec()
    inventory = backend_for(spec).inventory_from_outputs(
        spec, ClusterState.for_name(spec.name), plan_spec(spec, CREATED_AT).outputs
    )
    assert (inventory.connection.user, inventory.connection.become) == ("ubuntu", True)
    all_vars = inventory.to_ansible()["all"]["vars"]
    assert all_vars["ansible_user"] == "ubuntu" and all_vars["ansible_become"] is True, all_vars
    path = tmp_path / "inventory.yml"
    inventory.write(path)
    assert Inventory.read(path).connection == inventory.connection


def _group_ids(template) -> set[str]:
    return {group for nic in template.inputs["networkInterfaces"] for group in nic["securityGroups"]}


def test_allowed_cidrs_open_ssh_on_the_login_node_only(plan_aws):
    spec = aws_spec(
        node_groups=[
            {"name": "ctl", "roles": ["controller"], "instance_type": "m7i.xlarge"},
            {"name": "login", "roles": ["login"], "instance_type": "m7i.xlarge"},
            {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
        ],
        access={"allowed_cidrs": CIDRS},
    )
    recorded = plan_aws(spec)
    ssh = [r for r in recorded.of_type(INGRESS) if r.inputs.get("fromPort") == 22]
    recorded.one(SG, "fleet-login-sg")
    assert [r.name for r in ssh] == ["fleet-login-sg-ssh-0"], [r.urn for r in ssh]
    templates = {t.name: _group_ids(t) for t in recorded.of_type(TEMPLATE)}
    login_groups = templates["fleet-login-lt"] - templates["fleet-gpu-lt"]
    assert len(login_groups) == 1, templates
    assert ssh[0].inputs["securityGroupId"] in login_groups, (ssh[0].inputs, templates)
    assert templates["fleet-ctl-lt"] == templates["fleet-gpu-lt"], "only the login node takes outside SSH"


def test_no_allowed_cidrs_no_login_group(plan_aws):
    recorded = plan_aws(aws_spec())
    assert [g.name for g in recorded.of_type(SG)] == ["fleet-sg"]
