"""software.containers and software.container_image: the switch of roles/containers and the image the
validation runs inside, and how they reach the roles."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.spec.test_monitoring_switch import _inventory, _spec

from gpufleet.errors import SpecError
from gpufleet.infra.software import with_software
from gpufleet.spec import load_spec


@pytest.mark.parametrize(
    ("software", "containers", "image"),
    [
        ({}, True, None),
        ({"containers": False}, False, None),
        ({"container_image": "/srv/images/job.sqsh"}, True, "/srv/images/job.sqsh"),
        ({"container_image": "nvcr.io#nvidia/pytorch:25.01-py3"}, True, "nvcr.io#nvidia/pytorch:25.01-py3"),
        ({"container_image": "ubuntu:24.04"}, True, "ubuntu:24.04"),
    ],
)
def test_the_switch_and_the_image_reach_the_roles(
    tmp_path: Path, software: dict[str, object], containers: bool, image: str | None
) -> None:
    spec = load_spec(_spec(tmp_path, software))
    assert (spec.software.containers, spec.software.container_image) == (containers, image)
    all_vars = with_software(_inventory(), spec).to_ansible()["all"]["vars"]
    assert all_vars["gpufleet_software"]["containers"] is containers
    assert all_vars["gpufleet_software"]["container_image"] == image


@pytest.mark.parametrize(
    ("software", "message"),
    [
        ({"container_image": "/srv/images/job.tar"}, r"software\.container_image"),
        ({"container_image": "relative/job.sqsh"}, r"software\.container_image"),
        ({"container_image": "Ubuntu; rm -rf /"}, r"software\.container_image"),
        ({"containers": False, "container_image": "/srv/job.sqsh"}, "set containers: true"),
    ],
)
def test_bad_images_are_refused_with_the_field(
    tmp_path: Path, software: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        load_spec(_spec(tmp_path, software))
