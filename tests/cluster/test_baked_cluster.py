"""A baked image on a real local cluster: nodes boot from it, converge without installing a package, a
second configure changes nothing, validation passes; and no teardown of one cluster (down, reap) removes
the image another cluster runs from, nor does ``gpufleet image delete`` while one does.

Clusters ``bake`` (1 controller + 2 compute) and ``bake-b`` (1 + 1), torn down whatever happens.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cluster_cli import ROOT, Cli, leftovers, podman

pytestmark = pytest.mark.cluster

NAME = "bake"
OTHER = "bake-b"
# What a package install changes on a Debian node: apt's history, dpkg's database, the package lists.
PACKAGE_STATE = (
    "md5sum /var/log/apt/history.log /var/lib/dpkg/status; "
    "find /var/lib/apt/lists /var/cache/apt -maxdepth 1 -newer /var/lib/dpkg/status | sort"
)


def spec_file(workdir: Path, name: str, compute: int) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = name
    spec["node_groups"][1]["count"] = compute
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def package_state(node: str) -> list[str]:
    return podman("exec", node, "bash", "-c", PACKAGE_STATE)


def running(cluster: str) -> list[str]:
    return podman("ps", "--filter", f"label=gpufleet.cluster={cluster}", "--format", "{{.Names}}")


def image_users(cli: Cli, ref: str) -> list[str]:
    return next(i["used_by"] for i in cli.json("image", "list") if i["name"] == ref)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path, Path, Path]]:
    workdir = tmp_path_factory.mktemp("bake-test")
    state = workdir / "state"
    cli = Cli(workdir, state)
    specs = (spec_file(workdir, NAME, 2), spec_file(workdir, OTHER, 1))
    for name in (NAME, OTHER):
        assert not any(leftovers(f"gpufleet.cluster={name}").values()), f"a previous run left {name}"
    try:
        yield cli, state, *specs
    finally:
        for name, spec in zip((NAME, OTHER), specs, strict=True):
            if any(leftovers(f"gpufleet.cluster={name}").values()):
                cli("down", str(spec), expect=0)


def test_baked_nodes_configure_without_packages_and_images_outlive_other_clusters(
    clusters, baked_image: dict
) -> None:
    cli, state, spec, other = clusters
    ref, digest = baked_image["name"], baked_image["hash"]
    nodes = [f"{NAME}-controller", f"{NAME}-compute-0", f"{NAME}-compute-1"]

    up = cli("up", str(spec))
    assert f"node image {ref}: baked" in " ".join(up.stdout.split()), up.stdout
    inventory = yaml.safe_load((state / NAME / "inventory.yml").read_text())
    assert inventory["all"]["vars"]["gpufleet_baked_image_hash"] == digest
    before = {node: package_state(node) for node in nodes}
    assert all("/var/log/apt/history.log" in " ".join(lines) for lines in before.values()), before

    first = cli.json("configure", str(spec))
    assert first["ok"] is True and first["install_phase"] == f"skipped: baked image {digest}"
    # Per-cluster work happened (the cluster's key, slurm.conf, the daemons) and no package was touched.
    assert any("Render slurm.conf" in task for task in first["changed_tasks"]), first["changed_tasks"]
    assert not [t for t in first["changed_tasks"] if "Install" in t.split(": ", 1)[1]], first["changed_tasks"]
    assert {node: package_state(node) for node in nodes} == before

    second = cli.json("configure", str(spec))
    assert second["changed"] == 0, second["changed_tasks"]

    report = cli.json("validate", str(spec), "--out", str(state.parent / "report"))
    assert report["passed"] is True, json.dumps(report, indent=1)[:4000]

    # A second cluster from the same image: both use it; delete is refused, naming them.
    cli("up", str(other))
    assert image_users(cli, ref) == sorted([NAME, OTHER])
    refused = cli("image", "delete", ref, expect=4)
    assert "in use by cluster(s) bake, bake-b" in " ".join(refused.stderr.split()), refused.stderr

    # down of one cluster leaves the image, and the other cluster's nodes, alone.
    cli("down", str(other))
    assert image_users(cli, ref) == [NAME]
    assert sorted(running(NAME)) == sorted(nodes)

    # The reaper destroys an expired cluster the same way: the image stays for the one still running.
    cli("up", str(other))
    record_path = state / OTHER / "state.json"
    record = json.loads(record_path.read_text())
    record["expires_at"] = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()  # as if ttl had passed
    record_path.write_text(json.dumps(record))
    reaped = cli.json("reap")
    assert [(item["cluster"], item["action"]) for item in reaped["local"]] == [(OTHER, "destroyed")]
    assert image_users(cli, ref) == [NAME]
    assert sorted(running(NAME)) == sorted(nodes)

    cli("down", str(spec))
    assert image_users(cli, ref) == []
    assert subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0
