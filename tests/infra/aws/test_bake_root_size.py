"""Every AWS example boots from its baked image: the AMI's root snapshot (the builder's root volume) is
no larger than any group's root volume, which EC2 would refuse (issue 25, AWS audit N4)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufleet.bake.cloud import CloudBaker
from gpufleet.infra.aws.backend import backend
from gpufleet.infra.program import plan_spec
from gpufleet.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("aws-*.yaml"))
CREATED_AT = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def test_there_are_aws_examples():
    assert len(EXAMPLES) >= 3, EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_group_of_an_example_can_boot_its_baked_image(path, tmp_path):
    # the Capacity Block example's placeholder id is refused by the check: run it as its user would
    text = path.read_text(encoding="utf-8").replace("cr-0123456789abcdef0", "cr-0a1b2c3d4e5f60789")
    (tmp_path / path.name).write_text(text, encoding="utf-8")
    spec = load_spec(tmp_path / path.name)
    if not spec.access.allowed_cidrs:  # the builder is reached over SSH from these; any will do here
        spec = spec.model_copy(
            update={"access": spec.access.model_copy(update={"allowed_cidrs": ["203.0.113.7/32"]})}
        )
    builder = [r for r in CloudBaker(backend).preview(spec, CREATED_AT).of_type("aws:ec2/instance:Instance")]
    assert len(builder) == 1, [r.urn for r in builder]
    snapshot = builder[0].inputs["rootBlockDevice"]["volumeSize"]
    cluster = plan_spec(spec, CREATED_AT)
    roots = {
        template.name: mapping["ebs"]["volumeSize"]
        for template in cluster.of_type("aws:ec2/launchTemplate:LaunchTemplate")
        for mapping in template.inputs["blockDeviceMappings"]
    }
    assert len(roots) == len(spec.node_groups), roots
    too_small = {name: size for name, size in roots.items() if size < snapshot}
    assert not too_small, f"{path.name}: the baked AMI's {snapshot} GiB snapshot cannot boot {too_small}"
