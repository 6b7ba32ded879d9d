"""A routine second ``pulumi up`` keeps every node: a re-plan with a newer image and edited tags and ttl.

Pulumi's mocks compute no diff, so the test plays the engine's part: it keeps each resource's
``ignore_changes`` (recorded with a stack transformation), compares what the engine would compare (the
inputs less the ignored ones), and models a launch template as EC2 does, a new version whenever its
compared inputs change. An instance that follows a template is replaced when its template gets a new
version, so every instance's compared inputs (the template version among them) must stay the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pytest
from aws_specs import CREATED_AT, aws_spec

from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.plan import run_offline
from gpufleet.infra.program import cluster_program

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
FLEET = "aws:ec2/fleet:Fleet"  # an instant fleet is one launch: a changed input would launch it again


class Cloud(AwsMockCloud):
    """AWS as seen on a later day: ``image_date`` is the newest DLAMI's; templates get a new version
    when their compared inputs differ from ``previous`` (those of the first run)."""

    def __init__(self, spec, image_date: str, previous: Mapping[str, dict[str, Any]] | None = None) -> None:
        super().__init__(spec)
        self.image_date = image_date
        self.previous = previous or {}
        self.ignored: dict[str, list[str]] = {}

    def _ami(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.publish(self.image_date)
        return super()._ami(args)

    def _launch_template(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        state = super()._launch_template(name, inputs, rid)
        before = self.previous.get(name)
        if before is not None and before != compared(inputs, self.ignored.get(name, [])):
            state["latestVersion"] = state["defaultVersion"] = 2
        return state


def compared(inputs: Mapping[str, Any], ignored: list[str]) -> dict[str, Any]:
    return {key: value for key, value in inputs.items() if key not in ignored}


def plan(spec, cloud: Cloud) -> dict[str, tuple[str, dict[str, Any]]]:
    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            cloud.ignored[args.name] = list(args.opts.ignore_changes or [])

        pulumi.runtime.register_stack_transformation(keep)
        return cluster_program(spec, CREATED_AT)

    result = run_offline(program, cloud, stack=spec.name)
    return {r.name: (r.type, compared(r.inputs, cloud.ignored.get(r.name, []))) for r in result.resources}


@pytest.mark.parametrize(
    "edit",
    [
        {"lifetime": {"ttl": "48h"}},
        {"tags": {"team": "ml", "cost-center": "4711"}},
    ],
    ids=["ttl", "tags"],
)
def test_a_newer_image_and_edited_lifetime_or_tags_leave_every_instance_unchanged(edit):
    first_spec = aws_spec(lifetime={"ttl": "24h"})
    first_cloud = Cloud(first_spec, "20261101")
    first = plan(first_spec, first_cloud)
    templates = {name: inputs for name, (type_, inputs) in first.items() if type_ == TEMPLATE}
    assert templates, "the program made no launch template"

    second_spec = aws_spec(**{"lifetime": {"ttl": "24h"}, **edit})
    second = plan(second_spec, Cloud(second_spec, "20261215", previous=templates))

    instances = sorted(name for name, (type_, _) in first.items() if type_ in (INSTANCE, FLEET))
    assert instances, "the program made no instance"
    for name in instances:
        before, after = first[name][1], second[name][1]
        changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
        assert not changed, f"instance {name} would be replaced: {changed} changed ({before} -> {after})"


def test_a_pinned_image_id_is_the_users_to_change():
    """Pinning ``ami.id`` is a decision: a new id reaches the template (and so the nodes)."""
    provider = {"kind": "aws", "region": "us-east-1", "zone": "us-east-1a"}
    first_spec = aws_spec(provider={**provider, "ami": {"id": "ami-0123456789abcdef0"}})
    first_cloud = Cloud(first_spec, "20261101")
    first = plan(first_spec, first_cloud)
    second_spec = aws_spec(provider={**provider, "ami": {"id": "ami-0fedcba9876543210"}})
    second = plan(second_spec, Cloud(second_spec, "20261101"))
    gpu = "fleet-gpu-lt"
    assert first[gpu][1]["imageId"] != second[gpu][1]["imageId"]
