"""Baked images and teardown on real local clusters: two clusters boot from the session's baked image;
``gpufleet image delete`` is refused while either runs from it; ``down`` of one and ``reap`` of the other
leave the image in place for the next cluster. No configure here: tests/cluster/test_local_cluster.py
configures and validates a cluster on the baked image (zero package installs, second run changes nothing).

Clusters ``bake`` and ``bake-b`` (1 controller + 1 compute each; ``$GPUFLEET_E2E_NAME-bake`` and
``...-bake-b`` when that is set, so two checkouts on one machine can run it side by side), torn down
whatever happens. Other clusters may run from the same image meanwhile: the assertions are about these two.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cluster_cli import ROOT, Cli, labelled, local_podman, podman

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("baked_image")]

_PREFIX = f"{os.environ['GPUFLEET_E2E_NAME']}-" if os.environ.get("GPUFLEET_E2E_NAME") else ""
NAMES = (f"{_PREFIX}bake", f"{_PREFIX}bake-b")


def spec_file(workdir: Path, name: str) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = name
    spec["node_groups"][1]["count"] = 1
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def running(cluster: str) -> list[str]:
    return sorted(podman("ps", "--filter", f"label=gpufleet.cluster={cluster}", "--format", "{{.Names}}"))


def image_users(cli: Cli, ref: str) -> list[str]:
    return next(i["used_by"] for i in cli.json("image", "list") if i["name"] == ref)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path, list[Path]]]:
    workdir = tmp_path_factory.mktemp("bake-test")
    state = workdir / "state"
    cli = Cli(workdir, state)
    specs = [spec_file(workdir, name) for name in NAMES]
    for name in NAMES:
        assert not any(labelled(f"gpufleet.cluster={name}").values()), f"a previous run left {name}"
    try:
        yield cli, state, specs
    finally:
        for name, spec in zip(NAMES, specs, strict=True):
            if any(labelled(f"gpufleet.cluster={name}").values()):
                cli("down", str(spec))


def test_no_teardown_removes_an_image_another_cluster_runs_from(clusters, baked_image: dict) -> None:
    cli, state, (one, two) = clusters
    ref, digest = baked_image["name"], baked_image["hash"]

    for name, spec in zip(NAMES, (one, two), strict=True):
        up = cli("up", str(spec))
        assert f"node image {ref}: baked" in " ".join(up.stdout.split()), up.stdout
        inventory = yaml.safe_load((state / name / "inventory.yml").read_text())
        assert inventory["all"]["vars"]["gpufleet_baked_image_hash"] == digest
    assert set(NAMES) <= set(image_users(cli, ref))

    refused = cli("image", "delete", digest[:12], expect=4)
    said = " ".join(refused.stderr.split())
    assert "in use by cluster(s)" in said and all(name in said for name in NAMES), refused.stderr

    # down of one cluster: the image stays, the other cluster's nodes keep running.
    first, second = NAMES
    cli("down", str(one))
    users = image_users(cli, ref)
    assert first not in users and second in users, users
    assert running(second) == [f"{second}-compute-0", f"{second}-controller"]

    # The reaper tears an expired cluster down the same way, and leaves the image for the next one.
    record_path = state / second / "state.json"
    record = json.loads(record_path.read_text())
    record["expires_at"] = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()  # its ttl has passed
    record_path.write_text(json.dumps(record))
    reaped = cli.json("reap")
    assert [(item["cluster"], item["action"]) for item in reaped["local"]] == [(second, "destroyed")]
    assert running(second) == []
    assert not set(NAMES) & set(image_users(cli, ref))
    assert local_podman().exists("image", ref)
