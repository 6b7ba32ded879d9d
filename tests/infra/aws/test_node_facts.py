"""The AWS program hands every node of a baked cluster its facts in its user data, and no secret: the munge
key is a Secrets Manager secret with no value in the program, readable by the nodes' role alone, put by
gpufleet up afterwards (moto). Under Pulumi's mocks (tests/infra/program_recording.py's run_offline)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import boto3
import yaml
from aws_specs import CREATED_AT, aws_spec
from moto import mock_aws

from factories import make_host, make_inventory
from gpufleet.bake.baker import spec_hash
from gpufleet.infra.aws import munge_secret
from gpufleet.infra.aws.component import GpuClusterAws, GpuClusterAwsArgs
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.inventory.node_facts import FACTS_FILE, NodeFacts
from gpufleet.inventory.stack import from_stack_outputs

FLEET = "aws:ec2/fleet:Fleet"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
)
MUNGE_KEY = bytes(range(256)) * 4


def plan(spec: Any, baked: bool) -> Plan:
    image = None
    if baked:
        digest = spec_hash(spec)
        assert digest is not None
        image = CloudImage(
            id="ami-0baked", name="gpufleet-baked", digest=digest, base="ubuntu-22.04", created=""
        )

    def program() -> Any:
        args = GpuClusterAwsArgs(
            spec=spec,
            created_at=CREATED_AT,
            ssh_keys=("ssh-ed25519 AAAAC3Nz cluster-key",),
            baked=image,
            boot_configure=True,  # as AwsBackend.up sets it for a cluster made from the baked image
        )
        return GpuClusterAws(spec.name, args).stack_outputs

    return run_offline(program, AwsMockCloud(spec), stack=spec.name)


def _facts_of(user_data: str) -> NodeFacts:
    config = yaml.safe_load(user_data.removeprefix("#cloud-config\n"))
    (written,) = [f for f in config["write_files"] if f["path"] == FACTS_FILE]
    assert written["permissions"] == "0644" and written["owner"] == "root:root"
    return NodeFacts.parse(written["content"])


def _user_data(result: Plan) -> dict[str, str]:
    """Each instance's user data and each fleet template's (base64 in the template, as EC2 takes it)."""
    found = {r.name: r.inputs["userData"] for r in result.of_type(INSTANCE)}
    for template in result.of_type(TEMPLATE):
        if template.inputs.get("userData"):
            found[template.name] = base64.b64decode(template.inputs["userData"]).decode()
    return found


def test_every_node_of_a_baked_cluster_gets_its_facts_in_its_user_data_and_no_secret() -> None:
    spec = aws_spec(filesystem={"kind": "fsx_lustre", "size_gib": 1200, "mount_point": "/scratch"})
    result = plan(spec, baked=True)
    data = _user_data(result)
    assert sorted(data) == ["fleet-gpu-lt", "fleet-head"], sorted(data)
    secrets = result.of_type("aws:secretsmanager/secret:Secret")
    assert len(secrets) == 1 and secrets[0].inputs["recoveryWindowInDays"] == 0
    assert "secretString" not in secrets[0].inputs and "secretBinary" not in secrets[0].inputs
    assert not result.of_type("aws:secretsmanager/secretVersion:SecretVersion")  # the value: not in Pulumi
    head, gpu = _facts_of(data["fleet-head"]), _facts_of(data["fleet-gpu-lt"])
    assert head.host == "fleet-head" and head.controller_address is None
    assert head.groups == ["slurm_controller", "slurm_login"]
    # The head's own play reads the compute nodes (GresTypes, gres.conf): by name and host variables.
    assert [n for peer in head.peers for n in peer.names()] == ["fleet-gpu-0", "fleet-gpu-1"]
    assert (
        head.peers[0].host_vars["gpufleet_gpus"] == 8 and "gpufleet_private_ip" not in head.peers[0].host_vars
    )
    assert (
        gpu.peers == head.peers and gpu.host is None and gpu.groups == ["compute"]
    )  # a fleet's nodes read their name from a tag
    assert gpu.controller == "fleet-head" and gpu.controller_address  # the head instance's private IP
    assert gpu.host_vars["gpufleet_gpus"] == 8 and gpu.host_vars["gpufleet_fabric_interfaces"] == 32
    assert gpu.fabric.value == "efa" and gpu.cluster_vars["gpufleet_configure_on_node"] is True
    assert gpu.filesystem["mount_point"] == "/scratch" and gpu.filesystem["dns_name"]
    assert gpu.shared_results == "/scratch/.gpufleet/configure"
    assert gpu.baked_image_hash == spec_hash(spec)
    assert gpu.munge_key.kind == "aws-secretsmanager" and gpu.munge_key.region == "us-east-1"
    assert str(gpu.munge_key.secret_arn).startswith(
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpufleet/fleet-"
    )
    for text in data.values():
        assert "PRIVATE KEY" not in text and "munge.key" not in text
        # the baked image has python3: no apt-get update through the NAT on every node for it
        assert "packages" not in yaml.safe_load(text), text
        assert "ansible_ssh_private_key_file" not in text
    # The facts fit EC2's user data with room to spare.
    assert max(len(text.encode()) for text in data.values()) < 8 * 1024
    assert result.outputs["boot_configure"] is True
    assert from_stack_outputs(result.outputs).boot_configure is True


def test_the_nodes_role_reads_the_one_secret_and_a_fleet_names_each_instance() -> None:
    spec = aws_spec()
    result = plan(spec, baked=True)
    (policy,) = result.of_type("aws:iam/rolePolicy:RolePolicy")
    (secret,) = result.of_type("aws:secretsmanager/secret:Secret")
    document = json.loads(policy.inputs["policy"])
    (statement,) = document["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "secretsmanager:GetSecretValue"
    resource = statement["Resource"]
    assert resource.startswith("arn:aws:secretsmanager:") and secret.inputs["name"] in resource
    assert "*" not in resource
    tags = [r for r in result.of_type("aws:ec2/tag:Tag") if r.inputs["key"] == "gpufleet:host"]
    assert sorted(t.inputs["value"] for t in tags) == ["fleet-gpu-0", "fleet-gpu-1"]
    (gpu_template,) = [t for t in result.of_type(TEMPLATE) if t.name == "fleet-gpu-lt"]
    assert gpu_template.inputs["metadataOptions"]["instanceMetadataTags"] == "enabled"
    assert gpu_template.inputs["metadataOptions"]["httpTokens"] == "required"


def test_a_cluster_not_booted_from_a_baked_image_is_configured_by_push_as_before() -> None:
    result = plan(aws_spec(), baked=False)
    for text in _user_data(result).values():
        assert "write_files" not in text
    assert not result.of_type("aws:secretsmanager/secret:Secret")
    assert not result.of_type("aws:iam/rolePolicy:RolePolicy")
    assert not [r for r in result.of_type("aws:ec2/tag:Tag") if r.inputs["key"] == "gpufleet:host"]
    assert result.outputs["boot_configure"] is False


@mock_aws
def test_up_puts_the_munge_key_as_the_secrets_value_once(tmp_path: Path) -> None:
    client = boto3.client("secretsmanager", region_name="us-east-1")
    name = munge_secret.secret_name("fleet", "c0ffee")
    client.create_secret(Name=name)
    key = tmp_path / "munge.key"
    key.write_bytes(MUNGE_KEY)
    assert munge_secret.publish(client, "fleet", "c0ffee", key) is True
    assert client.get_secret_value(SecretId=name)["SecretBinary"] == MUNGE_KEY
    assert munge_secret.publish(client, "fleet", "c0ffee", key) is False  # the same value: nothing put
    assert len(client.list_secret_version_ids(SecretId=name)["Versions"]) == 1


def test_up_configures_at_boot_a_new_cluster_and_one_that_did_never_one_made_before_the_bake(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The kept-image rule (tests/infra/aws/test_baked_up.py): nodes made before a bake keep their user
    data."""
    from gpufleet.infra.aws.backend import AwsBackend
    from gpufleet.infra.pulumi_stack import PulumiBackend
    from gpufleet.inventory.model import Inventory
    from gpufleet.progress import SilentReporter
    from gpufleet.spec.model import FabricKind, Role
    from gpufleet.state import ClusterState

    seen: list[bool] = []
    host = make_host("h", [Role.CONTROLLER, Role.COMPUTE], ip="a", instance_type="m7i.xlarge", cpus=2)
    made_by_push = make_inventory([host], cluster="fleet", provider="aws", fabric=FabricKind.EFA)

    def deploy(self: Any, spec: Any, state: Any, reporter: Any, baked: Any = None) -> Inventory:
        seen.append(self.boot_configure)
        return made_by_push

    monkeypatch.setattr(PulumiBackend, "deploy", deploy)
    monkeypatch.setattr(PulumiBackend, "inventory_from_outputs", lambda self, spec, state, outputs: outputs)
    backend = AwsBackend()
    state = ClusterState(name="fleet", root=tmp_path)
    backend.up(aws_spec(), state, SilentReporter(), None)  # new: no inventory yet
    made_by_push.write(state.inventory_file)
    backend.up(aws_spec(), state, SilentReporter(), None)
    made_by_push.model_copy(update={"boot_configure": True}).write(state.inventory_file)
    backend.up(aws_spec(), state, SilentReporter(), None)
    assert seen == [True, False, True] and backend.boot_configure is False
    # GPUFLEET_CONFIGURE_FROM=here or head asks for a push: a new cluster gets no facts; one that configures
    # at boot keeps its user data (a change would replace its instances).
    monkeypatch.setenv("GPUFLEET_CONFIGURE_FROM", "here")
    state.inventory_file.unlink()
    backend.up(aws_spec(), state, SilentReporter(), None)
    made_by_push.model_copy(update={"boot_configure": True}).write(state.inventory_file)
    backend.up(aws_spec(), state, SilentReporter(), None)
    assert seen[3:] == [False, True]


@mock_aws
def test_a_failed_up_still_puts_the_munge_key_when_its_secret_exists(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """pulumi up failed after the secret was made (a fleet short of capacity): the nodes it launched wait for
    the value, so it is put anyway, and the up's own failure is what is raised. No secret: nothing put."""
    import pytest

    from gpufleet.errors import ProvisionError
    from gpufleet.infra.aws.backend import AwsBackend
    from gpufleet.infra.pulumi_stack import PulumiBackend
    from gpufleet.progress import SilentReporter
    from gpufleet.state import ClusterState

    def failed_up(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise ProvisionError("pulumi up failed: InsufficientInstanceCapacity")

    monkeypatch.setattr(PulumiBackend, "up", failed_up)
    state = ClusterState(name="fleet", root=tmp_path)
    monkeypatch.setattr(ClusterState, "cluster_id", property(lambda self: "c0ffee"))
    baked = CloudImage(
        id="ami-0baked", name="gpufleet-baked", digest="ab" * 32, base="ubuntu-22.04", created=""
    )
    with pytest.raises(ProvisionError, match="InsufficientInstanceCapacity"):  # no secret yet: no other error
        AwsBackend().up(aws_spec(), state, SilentReporter(), None, baked=baked)
    client = boto3.client("secretsmanager", region_name="us-east-1")
    name = munge_secret.secret_name("fleet", "c0ffee")
    client.create_secret(Name=name)
    with pytest.raises(ProvisionError, match="InsufficientInstanceCapacity"):
        AwsBackend().up(aws_spec(), state, SilentReporter(), None, baked=baked)
    assert client.get_secret_value(SecretId=name)["SecretBinary"] == state.munge_key.read_bytes()


def test_the_facts_name_the_secrets_endpoint_boto3_resolves_for_the_region(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Not secretsmanager.<region>.amazonaws.com everywhere: aws-cn's is amazonaws.com.cn, aws-eusc's
    amazonaws.eu, and the user's FIPS choice holds; the node calls and signs for the facts' endpoint
    (gpufleet.node.boot_configure)."""
    for name in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", "true")
    assert munge_secret.endpoint("us-east-1") == "https://secretsmanager-fips.us-east-1.amazonaws.com"
    monkeypatch.delenv("AWS_USE_FIPS_ENDPOINT")
    assert munge_secret.endpoint("us-east-1") == "https://secretsmanager.us-east-1.amazonaws.com"
    assert munge_secret.endpoint("cn-north-1") == "https://secretsmanager.cn-north-1.amazonaws.com.cn"
    assert munge_secret.endpoint("eusc-de-east-1") == "https://secretsmanager.eusc-de-east-1.amazonaws.eu"
    gpu = _facts_of(_user_data(plan(aws_spec(), baked=True))["fleet-gpu-lt"])
    assert gpu.munge_key.endpoint == "https://secretsmanager.us-east-1.amazonaws.com"


def test_every_partition_botocore_knows_is_named_for_its_regions() -> None:
    """catalog.aws.partition against botocore's own endpoints.json (the source it cites)."""
    import botocore.loaders

    from gpufleet.catalog.aws import partition

    data = botocore.loaders.Loader().load_data("endpoints")
    for known in data["partitions"]:
        for region in known["regions"]:
            assert partition(region) == known["partition"], region
    assert partition("eusc-de-east-1") == "aws-eusc" and partition("eu-isoe-west-1") == "aws-iso-e"
