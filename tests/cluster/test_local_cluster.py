"""End to end on a real local cluster: 1 controller + 2 compute podman nodes, taken from spec to validated
to gone, through the ``gpufleet`` command exactly as a user runs it.

Needs root, podman, runc and debootstrap (``scripts/bootstrap.sh`` installs them). The first run on a
machine builds the node image and bakes the roles' install phase into it (conftest.py, a few minutes);
later runs reuse both, so the nodes here configure only per-cluster work.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_cli import GPUFLEET, ROOT, Cli, package_state, podman, require_local_backend
from cluster_cli import leftovers as labelled

pytestmark = pytest.mark.cluster

# GPUFLEET_E2E_NAME lets two checkouts on one machine run this test side by side.
NAME = os.environ.get("GPUFLEET_E2E_NAME", "e2e")
LABEL = f"gpufleet.cluster={NAME}"


def leftovers() -> dict[str, list[str]]:
    return labelled(LABEL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path, Path]]:
    require_local_backend()
    workdir = tmp_path_factory.mktemp("e2e")
    state = workdir / "state"
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = NAME
    spec_path = workdir / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    cli = Cli(workdir, state)
    assert not any(leftovers().values()), f"a previous run left {leftovers()}"
    try:
        yield cli, spec_path, state
    finally:
        if any(leftovers().values()):  # the test failed half-way: leave nothing behind
            subprocess.run(
                [GPUFLEET, "down", str(spec_path)], cwd=workdir, env=cli.env, capture_output=True, check=False
            )


def test_up_configure_validate_reconfigure_down(cluster, baked_image: dict) -> None:
    cli, spec, state = cluster

    up = cli.json("up", str(spec))
    nodes = [f"{NAME}-controller", f"{NAME}-compute-0", f"{NAME}-compute-1"]
    assert [h["name"] for h in up["hosts"]] == nodes
    assert sorted(leftovers()["containers"]) == sorted(nodes)
    assert (state / NAME / "inventory.yml").exists()
    assert oct((state / NAME / "munge.key").stat().st_mode & 0o777) == "0o400"

    # A stopped node comes back on a re-run of up (a failed or interrupted run can be re-run).
    podman("stop", "-t", "1", f"{NAME}-compute-1")
    cli("up", str(spec))
    status = cli.json("status", str(spec))
    assert {n["name"]: n["running"] for n in status["nodes"]} == {
        f"{NAME}-controller": True,
        f"{NAME}-compute-0": True,
        f"{NAME}-compute-1": True,
    }

    # The nodes run the session's baked image (conftest.py): configure does only the per-cluster work
    # and installs no package.
    inventory = yaml.safe_load((state / NAME / "inventory.yml").read_text())
    assert inventory["all"]["vars"]["gpufleet_baked_image_hash"] == baked_image["hash"]
    packages = {node: package_state(node) for node in nodes}

    first = cli.json("configure", str(spec))
    assert first["ok"] is True and first["changed"] > 0
    assert first["install_phase"] == f"skipped: baked image {baked_image['hash']}"
    rendered = [task for task in first["changed_tasks"] if task.endswith(": Render slurm.conf")]
    assert len(rendered) == len(nodes), first["changed_tasks"]
    assert {node: package_state(node) for node in nodes} == packages

    report = cli.json("validate", str(spec), "--out", str(state.parent / "report"))
    assert report["passed"] is True, json.dumps(report, indent=1)[:4000]
    tests = {t["collective"]: t for t in report["tests"]}
    assert set(tests) == {"all_reduce", "all_gather"}
    for collective, test in tests.items():
        assert test["ranks"] == 2 and len(test["hosts"]) == 2, collective
        assert test["verdict"]["passed"] is True, test["verdict"]
        assert test["wrong_total"] == 0 and test["out_of_bounds"] == 0
        big = [row for row in test["rows"] if row["size"] >= 4 << 20]
        assert big and all(row["oop"]["busbw"] > 0 for row in big), collective
    assert (state.parent / "report" / "validation-report.md").exists()
    assert (state.parent / "report" / "busbw.png").stat().st_size > 10_000

    # The same roles a second time change nothing.
    second = cli.json("configure", str(spec))
    assert second["changed"] == 0, second["changed_tasks"]

    # A floor the cluster cannot reach fails the gate: exit 1, and the report says why.
    impossible = yaml.safe_load(spec.read_text())
    impossible["validation"]["min_busbw"] = {"all_reduce": 10_000.0, "all_gather": 10_000.0}
    impossible["validation"]["find_bad_nodes"] = False
    strict = spec.with_name("strict.yaml")
    strict.write_text(yaml.safe_dump(impossible))
    failed = cli.json("validate", str(strict), "--out", str(state.parent / "strict"), expect=1)
    assert failed["passed"] is False
    assert all(not t["verdict"]["passed"] for t in failed["tests"])
    assert "floor" in json.dumps(failed["tests"][0]["verdict"])

    down = cli.json("down", str(spec))
    assert down["leftovers"] == []
    assert any(item.startswith(f"network gpufleet-{NAME}") for item in down["removed"])
    assert leftovers() == {"containers": [], "networks": [], "volumes": []}
    assert not (state / NAME).exists()

    # down on a cluster that is already gone is harmless.
    assert cli.json("down", str(spec))["removed"] == []
