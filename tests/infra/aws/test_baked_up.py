"""``up`` on AWS with a baked AMI: every group boots it, the outputs say so, and a bake made after the
cluster replaces no live node (the kept-image rule): those nodes keep their image, and configure runs
their install phase because the outputs then record no baked hash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
from aws_specs import CREATED_AT, aws_spec

from gpufleet.bake.baker import baked_and_current, spec_hash
from gpufleet.infra.aws.mocks import AwsMockCloud
from gpufleet.infra.images import CloudImage
from gpufleet.infra.plan import run_offline
from gpufleet.infra.program import pulumi_backend
from gpufleet.inventory.stack import from_stack_outputs

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
KEPT_BY_ENGINE = ("instance", "fleet")


def baked_image(spec) -> CloudImage:
    digest = spec_hash(spec)
    assert digest is not None
    return CloudImage(
        id="ami-0bakedbakedbaked0", name="gpufleet-baked", digest=digest, base="ubuntu-22.04", created=""
    )


class Engine(AwsMockCloud):
    """Plays the engine's part for ``ignore_changes``: a template whose first run recorded an image keeps
    that image in its state (what ``pulumi up`` does with an ignored input) and gets no new version."""

    def __init__(self, spec, kept: Mapping[str, str] | None = None) -> None:
        super().__init__(spec)
        self.kept = kept or {}
        self.ignored: dict[str, list[str]] = {}

    def _launch_template(self, name: str, inputs: Mapping[str, Any], rid: str) -> dict[str, Any]:
        state = super()._launch_template(name, inputs, rid)
        if name in self.kept and "imageId" in self.ignored.get(name, []):
            state["imageId"] = self.kept[name]
        return state


def plan(spec, cloud: Engine, baked: CloudImage | None):
    def program() -> Any:
        def keep(args: pulumi.ResourceTransformationArgs) -> None:
            cloud.ignored[args.name] = list(args.opts.ignore_changes or [])

        pulumi.runtime.register_stack_transformation(keep)
        return pulumi_backend(spec).program(spec, CREATED_AT, (), baked)

    return run_offline(program, cloud, stack=spec.name)


def test_every_group_boots_the_baked_ami_and_the_outputs_record_its_hash():
    spec = aws_spec()
    baked = baked_image(spec)
    result = plan(spec, Engine(spec), baked)
    templates = result.of_type(TEMPLATE)
    assert len(templates) == 2, [t.urn for t in templates]
    assert {t.inputs["imageId"] for t in templates} == {baked.id}, [
        (t.urn, t.inputs["imageId"]) for t in templates
    ]
    assert result.outputs["baked_image_hash"] == baked.digest, result.outputs["baked_image_hash"]
    inventory = from_stack_outputs(result.outputs)
    assert inventory.baked_image_hash == baked.digest
    assert baked_and_current(spec, inventory.baked_image_hash) == baked.digest


def test_a_bake_after_the_first_up_replaces_no_node_and_leaves_the_install_phase_on():
    spec = aws_spec()
    first = plan(spec, Engine(spec), None)
    assert first.outputs["baked_image_hash"] is None
    images = {t.name: t.inputs["imageId"] for t in first.of_type(TEMPLATE)}
    cloud = Engine(spec, kept=images)
    second = plan(spec, cloud, baked_image(spec))
    for template in second.of_type(TEMPLATE):
        assert "imageId" in cloud.ignored[template.name], (
            f"{template.urn} would roll its nodes to a new image"
        )
    nodes = {r.name: r.inputs for r in first.resources if r.type.split(":")[-1].lower() in KEPT_BY_ENGINE}
    assert nodes, "the program made no node"
    for resource in second.resources:
        if resource.name in nodes:
            assert resource.inputs == nodes[resource.name], f"{resource.urn} would change"
    assert second.outputs["baked_image_hash"] is None, "nodes kept on the old image are not baked"
    assert baked_and_current(spec, from_stack_outputs(second.outputs).baked_image_hash) is None


def test_a_baked_hash_of_other_roles_or_pins_turns_the_install_phase_back_on():
    spec = aws_spec()
    assert baked_and_current(spec, "0" * 64) is None
    assert baked_and_current(spec, None) is None
