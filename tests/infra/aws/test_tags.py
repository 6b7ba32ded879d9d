"""Tags: every taggable resource is registered with the explicit provider whose default tags are the
cluster's; what EC2 creates at launch (volumes, interfaces) is tagged by the launch template."""

from __future__ import annotations

import inspect
import json
from functools import cache

import pulumi_aws as aws
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.tags import AWS_EXPIRES_TAG, PLAN_CLUSTER_ID, aws_tags

PROVIDER = "pulumi:providers:aws"


@cache
def accepts_tags(type_: str) -> bool:
    """Whether the pulumi-aws resource of this type token takes a ``tags`` argument."""
    package, module_path, class_name = type_.split(":")
    if package != "aws":
        return False
    module = getattr(aws, module_path.split("/")[0])
    cls = getattr(module, class_name)
    return "tags" in inspect.signature(cls._internal_init).parameters


def provider_name(reference: str | None) -> str | None:
    # "<provider urn>::<provider id>"; the urn ends with "::<name>"
    return reference.split("::")[-2] if reference else None


def test_every_taggable_resource_gets_the_cluster_tags(plan_aws):
    spec = aws_spec(
        filesystem={
            "kind": "fsx_lustre",
            "size_gib": 1200,
            "data_repository": {"s3_path": "s3://bucket/prefix"},
        },
        access={"allowed_cidrs": ["203.0.113.0/24"]},
    )
    recorded = plan_aws(spec)
    (provider,) = recorded.of_type(PROVIDER)
    default_tags = provider.inputs["defaultTags"]
    default_tags = json.loads(default_tags) if isinstance(default_tags, str) else default_tags
    expected = aws_tags(spec, CREATED_AT, PLAN_CLUSTER_ID)
    assert default_tags == {"tags": expected}, f"{provider.urn}: {default_tags}"
    assert expected["team"] == "ml" and expected["gpufleet:cluster"] == "fleet"
    assert expected["gpufleet:expires-at"] == "2026-11-23T09:00:00Z"
    assert expected["gpufleet:cluster-id"] == PLAN_CLUSTER_ID

    taggable = [r for r in recorded.resources if accepts_tags(r.type)]
    assert len({r.type for r in taggable}) >= 12, sorted({r.type for r in taggable})
    for resource in taggable:
        used = provider_name(recorded.providers[resource.urn])
        assert used == provider.name, f"{resource.urn}: registered with provider {used}, not {provider.name}"
        own = resource.inputs.get("tags") or {}
        clash = {k for k in own if k in expected and own[k] != expected[k]}
        assert not clash, f"{resource.urn}: its own tags override the cluster's {clash}"


def test_every_aws_resource_uses_the_explicit_provider(plan_aws):
    recorded = plan_aws(aws_spec())
    for resource in recorded.resources:
        if resource.type.startswith("aws:"):
            assert provider_name(recorded.providers[resource.urn]) == "fleet-provider", resource.urn


def test_launch_templates_tag_what_ec2_creates_at_launch(plan_aws):
    spec = aws_spec()
    recorded = plan_aws(spec)
    for template in recorded.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        specs = {t["resourceType"]: t["tags"] for t in template.inputs["tagSpecifications"]}
        assert {"volume", "network-interface"} <= set(specs), f"{template.urn}: {sorted(specs)}"
        # no expiry at launch: those tags are the first up's for good (AWS audit 2026-11-27 H1)
        at_launch = {
            k: v for k, v in aws_tags(spec, CREATED_AT, PLAN_CLUSTER_ID).items() if k != AWS_EXPIRES_TAG
        }
        for kind, tags in specs.items():
            assert tags == at_launch, f"{template.urn}: {kind} tags {tags}"
