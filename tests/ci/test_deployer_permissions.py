"""The deployer's permissions (examples/ci/aws/deployer-policy.json, examples/ci/gcp/deployer-role.yaml,
examples/ci/azure/deployer-role.json)
cover every resource type and provider function the offline plan of every example creates or calls, and
gpufleet's own calls around the program (the leftover check, the reaper, SSH to the nodes); and they hold
nothing that none of those needs. What each type needs is tests/ci/data/deployer_permissions.yaml, with
its sources."""

from __future__ import annotations

import fnmatch
import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.infra import program
from gpufleet.infra.plan import Plan, run_offline
from gpufleet.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
NEEDS = yaml.safe_load(
    (Path(__file__).parent / "data" / "deployer_permissions.yaml").read_text(encoding="utf-8")
)
AWS_POLICY = json.loads(
    (ROOT / "examples" / "ci" / "aws" / "deployer-policy.json").read_text(encoding="utf-8")
)
GCP_ROLE_TEXT = (ROOT / "examples" / "ci" / "gcp" / "deployer-role.yaml").read_text(encoding="utf-8")
GCP_ROLE = yaml.safe_load(GCP_ROLE_TEXT)
AZURE_ROLE = json.loads(
    (ROOT / "examples" / "ci" / "azure" / "deployer-role.json").read_text(encoding="utf-8")
)
# The Reader role's one action: the leftover check's tag query sees only what the caller may read.
AZURE_WILDCARDS = {"*/read"}
# Types that call no cloud API: Pulumi's providers, gpufleet's components, keys made by pulumi-tls.
NO_CLOUD_API = ("pulumi:providers:", "gpufleet:", "tls:")
# ec2:Describe* only: Pulumi's reads and waits use many Describe calls, none of which takes a resource
# ARN ("Describe actions do not support resource-level permissions", Service Authorization Reference).
WILDCARDS = {"ec2:Describe*"}
EXAMPLES = sorted(
    path
    for path in (ROOT / "examples").glob("*.yaml")
    if load_spec(path).provider.kind in ("aws", "gcp", "azure")
)


class RecordingCloud:
    """The cloud's own offline mocks, noting every provider function the program calls."""

    def __init__(self, cloud: Any) -> None:
        self.cloud = cloud
        self.functions: set[str] = set()

    def computed(self, type_: str, name: str, inputs: Any, serial: int) -> dict[str, Any]:
        return self.cloud.computed(type_, name, inputs, serial)

    def invoke(self, token: str, args: Any) -> dict[str, Any]:
        self.functions.add(token)
        return self.cloud.invoke(token, args)


@cache
def planned(path: Path) -> tuple[str, Plan, frozenset[str]]:
    spec = load_spec(path)
    cloud = RecordingCloud(program.mock_cloud(spec))
    created = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
    plan = run_offline(lambda: program.cluster_program(spec, created), cloud, stack=spec.name)
    return spec.provider.kind, plan, frozenset(cloud.functions)


def _needed(path: Path) -> dict[str, list[str]]:
    """What the example's plan needs, by what needs it (a resource type, a function, a gpufleet step)."""
    kind, plan, functions = planned(path)
    table = NEEDS[kind]
    needed: dict[str, list[str]] = {}
    for resource in plan.resources:
        if resource.type.startswith(NO_CLOUD_API):
            continue
        assert resource.type in table["resources"], (
            f"{path.name}: {resource.urn} is of type {resource.type}, which "
            "tests/ci/data/deployer_permissions.yaml does not list: add what it needs, with the source"
        )
        needed[resource.type] = table["resources"][resource.type]
    for token in functions:
        assert token in table["functions"], f"{path.name}: the program calls {token}: add what it needs"
        needed[token] = table["functions"][token]
    needed.update(table["gpufleet"])
    return needed


def _azure_allows(action: str) -> bool:
    """Azure matches actions case-insensitively, ``*`` as a wildcard, in Actions or DataActions."""
    patterns = [*AZURE_ROLE["Actions"], *AZURE_ROLE["DataActions"]]
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in patterns)


def _aws_allows(action: str) -> bool:
    for statement in AWS_POLICY["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and any(
            fnmatch.fnmatchcase(action, pattern) for pattern in actions
        ):
            return True
    return False


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_resource_the_plan_creates_is_covered(path: Path):
    kind = load_spec(path).provider.kind
    missing = []
    for what, permissions in _needed(path).items():
        for permission in permissions:
            if kind == "aws":
                allowed = _aws_allows(permission)
            elif kind == "azure":
                allowed = (
                    _azure_allows(permission)
                    and permission in AZURE_ROLE["DataActions" if "/blobs/" in permission else "Actions"]
                )
            else:
                allowed = permission in GCP_ROLE["includedPermissions"] or (
                    permission in NEEDS["gcp"]["service_account_user"]
                )
            if not allowed:
                missing.append(f"{what}: {permission}")
    assert not missing, f"{path.name}: the deployer lacks " + "; ".join(missing)


def test_the_examples_cover_both_clouds_and_their_storage():
    kinds = {planned(path)[0] for path in EXAMPLES}
    types = {resource.type for path in EXAMPLES for resource in planned(path)[1].resources}
    assert kinds == {"aws", "gcp", "azure"}
    for needed in (
        "azure-native:storagecache:AmlFilesystem",
        "azure-native:compute:VirtualMachineScaleSet",
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "gcp:lustre/instance:Instance",
        "gcp:filestore/instance:Instance",
        "aws:ec2/fleet:Fleet",
    ):
        assert needed in types, f"no example plans a {needed}: the coverage test would not see it"


def _every_needed(kind: str) -> set[str]:
    table = NEEDS[kind]
    return {
        permission
        for section in ("resources", "functions", "gpufleet")
        for permissions in table[section].values()
        for permission in permissions
    }


def test_the_aws_policy_holds_nothing_unneeded():
    needed = _every_needed("aws")
    extra = []
    for statement in AWS_POLICY["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            if "*" in action:
                assert action in WILDCARDS, f"{statement['Sid']}: {action} is wider than needed"
            elif action not in needed:
                extra.append(f"{statement['Sid']}: {action}")
    assert not extra, "the policy allows what nothing needs: " + ", ".join(extra)


def test_the_azure_role_holds_nothing_unneeded_and_is_assignable_to_a_subscription_only():
    needed = _every_needed("azure")
    for key in ("Actions", "DataActions"):
        listed = AZURE_ROLE[key]
        assert len(set(listed)) == len(listed), f"{key}: a permission is listed twice"
        for action in listed:
            if "*" in action:
                assert action in AZURE_WILDCARDS, f"{action} is wider than needed"
        extra = sorted(set(listed) - needed)
        assert not extra, f"the role's {key} hold what nothing needs: {extra}"
    assert AZURE_ROLE["NotActions"] == [] and AZURE_ROLE["IsCustom"] is True
    assert all(a.startswith("Microsoft.Storage/") and "/blobs/" in a for a in AZURE_ROLE["DataActions"])
    (scope,) = AZURE_ROLE["AssignableScopes"]
    assert scope.startswith("/subscriptions/") and scope.count("/") == 2, scope


def test_aws_iam_writes_and_passrole_are_limited_to_gpufleets_path():
    from gpufleet.infra.aws.leftovers import IAM_PATH

    for statement in AWS_POLICY["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        writes = [
            a
            for a in actions
            if a.startswith("iam:") and not a.startswith(("iam:List", "iam:CreateServiceLinkedRole"))
        ]
        if writes:
            assert statement["Resource"] == [
                f"arn:aws:iam::*:role{IAM_PATH}*",
                f"arn:aws:iam::*:instance-profile{IAM_PATH}*",
            ], statement["Sid"]


def test_the_gcp_role_holds_nothing_unneeded_and_acts_as_no_account():
    included = set(GCP_ROLE["includedPermissions"])
    assert len(included) == len(GCP_ROLE["includedPermissions"]), "a permission is listed twice"
    extra = included - _every_needed("gcp")
    assert not extra, f"the role holds what nothing needs: {sorted(extra)}"
    # actAs comes from roles/iam.serviceAccountUser bound on the VMs' service account alone, never
    # project-wide through the custom role
    assert "iam.serviceAccounts.actAs" not in included
    assert "--role=roles/iam.serviceAccountUser" in GCP_ROLE_TEXT
    assert "compute@developer.gserviceaccount.com" in GCP_ROLE_TEXT
    assert GCP_ROLE["stage"] == "GA" and GCP_ROLE["title"]


@pytest.mark.parametrize(
    "path", [p for p in EXAMPLES if load_spec(p).provider.kind == "gcp"], ids=lambda p: p.name
)
def test_gcp_vms_run_as_a_service_account_so_the_deployer_must_act_as_it(path: Path):
    _, plan, _ = planned(path)
    vms = [r for r in plan.resources if r.type == "gcp:compute/instance:Instance"]
    assert vms and all(r.inputs.get("serviceAccount") for r in vms), [r.urn for r in vms]
    assert "iam.serviceAccounts.actAs" in NEEDS["gcp"]["resources"]["gcp:compute/instance:Instance"]
    assert "iam.serviceAccounts.actAs" in NEEDS["gcp"]["service_account_user"]
