"""The GCP mocks answer image lookups as Compute does: only the families their publishers list in the
projects gpufleet asks (``PUBLIC_IMAGES`` in infra/gcp/mocks.py, sourced there), and Compute's 404 for
any other project or family; and they refuse the resource names and labels Compute refuses (a spec with a
too long name is stopped earlier, by preflight's resource_names check)."""

from __future__ import annotations

import pytest
from gcp_testlib import CREATED_AT, gcp_spec

from gpufleet.catalog import gcp as rules
from gpufleet.infra.gcp.mocks import GcpMockCloud
from gpufleet.infra.program import plan_spec

NOT_FOUND = "Error 404"
FAMILIES = sorted(
    {(s.image_project, s.image_family) for s in rules.SERIES}
    | set(rules.PLAIN_UBUNTU.values())
    | {(rules._DEFAULT_SERIES.image_project, rules._DEFAULT_SERIES.image_family)}
)


def lookup(project: str, family: str) -> dict[str, object]:
    return GcpMockCloud(gcp_spec()).invoke(
        "gcp:compute/getImage:getImage", {"project": project, "family": family}
    )


@pytest.mark.parametrize(("project", "family"), FAMILIES, ids=[f for _, f in FAMILIES])
def test_every_family_the_catalog_boots_is_one_its_project_lists(project, family):
    image = lookup(project, family)
    assert (image["project"], image["family"], image["status"]) == (project, family, "READY"), image


@pytest.mark.parametrize(
    ("project", "family"),
    [
        # From 24.04 the family names the architecture.
        ("ubuntu-os-cloud", "ubuntu-2404-lts"),
        # The accelerator family lives in its own project.
        ("ubuntu-os-cloud", "ubuntu-accelerator-2404-amd64-with-nvidia-580"),
        ("ubuntu-os-accelerator-images", "ubuntu-2204-lts"),
    ],
    ids=["2404-without-arch", "accelerator-in-ubuntu-os-cloud", "plain-in-accelerator-project"],
)
def test_a_family_its_project_does_not_list_fails_as_compute_does(project, family):
    with pytest.raises(RuntimeError, match=f"{NOT_FOUND}.*projects/{project}/global/images/family/{family}"):
        lookup(project, family)


def test_a_catalog_family_with_a_typo_fails_the_plan(monkeypatch):
    """The defect the lookups guard: a family its project does not list stops ``up`` at the lookup."""
    monkeypatch.setitem(rules.PLAIN_UBUNTU, "ubuntu-24.04", ("ubuntu-os-cloud", "ubuntu-2404-lts"))
    monkeypatch.setitem(rules.IMAGE_OS_RELEASE, "ubuntu-2404-lts", "ubuntu-24.04")
    with pytest.raises(Exception, match=NOT_FOUND):
        plan_spec(gcp_spec(), CREATED_AT)


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ({"name": "Head-VM"}, "resource.name"),
        ({"name": "a" * 64}, "resource.name"),
        ({"name": "1st-node"}, "resource.name"),
        ({"name": "node-"}, "resource.name"),
        ({"name": "ok", "labels": {"Team": "ml"}}, "resource.labels"),
        ({"name": "ok", "labels": {"team": "ML"}}, "resource.labels"),
        ({"name": "ok", "labels": {"team": "x" * 64}}, "resource.labels"),
    ],
    ids=[
        "upper-case",
        "64-chars",
        "leading-digit",
        "trailing-dash",
        "label-key-case",
        "label-value-case",
        "label-64",
    ],
)
def test_names_and_labels_compute_refuses_fail_under_the_mocks(inputs, field):
    with pytest.raises(RuntimeError, match=f"Invalid value for field '{field}'"):
        GcpMockCloud(gcp_spec()).computed("gcp:compute/instance:Instance", "vm", inputs, 0)
