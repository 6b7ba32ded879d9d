"""The baked image's key: what changes it (a role file, a pin) and what does not (docs, node sizes), how
an image is named on the command line, and that configure trusts a recorded hash only while current."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpufleet.bake import baker
from gpufleet.errors import ProvisionError
from gpufleet.infra import images
from gpufleet.infra.local import bake
from gpufleet.spec import parse_spec

ROOT = Path(__file__).resolve().parents[3]


def local_spec(**changes: object):
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = data
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = value
    return parse_spec(yaml.safe_dump(data))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder in images.HASHED_FOLDERS:
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "local.md").write_text("# notes\n")
    return tmp_path


def key(root: Path, **changes: object) -> str:
    return images.content_hash(root, bake.bake_pins(local_spec(**changes)))


def test_a_role_file_change_changes_the_hash(tree: Path) -> None:
    before = key(tree)
    assert key(tree) == before
    packages = tree / "roles" / "slurm" / "vars" / "Debian.yml"
    packages.write_text(packages.read_text() + "# one more line\n")
    assert key(tree) != before


def test_a_new_role_or_playbook_changes_the_hash(tree: Path) -> None:
    before = key(tree)
    (tree / "roles" / "extra" / "tasks").mkdir(parents=True)
    (tree / "roles" / "extra" / "tasks" / "main.yml").write_text("---\n[]\n")
    after_role = key(tree)
    assert after_role != before
    (tree / "playbooks" / "site.yml").write_text((tree / "playbooks" / "site.yml").read_text() + "\n")
    assert key(tree) != after_role


def test_pins_change_the_hash(tree: Path) -> None:
    before = key(tree)
    assert key(tree, software__nccl_tests="2.19.5") != before
    assert key(tree, software__nccl="2.26.2") != before
    assert key(tree, provider__mirror="http://mirror.example/debian") != before
    assert key(tree, provider__gpu_stack=True) != before


def test_unrelated_changes_keep_the_hash(tree: Path) -> None:
    before = key(tree)
    (tree / "docs" / "local.md").write_text("# other notes\n")
    (tree / "roles" / "slurm" / "README.md").write_text("# Slurm\nchanged words\n")
    (tree / "roles" / "slurm" / "tests").mkdir(exist_ok=True)
    (tree / "roles" / "slurm" / "tests" / "test.yml").write_text("---\n- hosts: all\n")
    (tree / "roles" / ".cache").mkdir()
    (tree / "roles" / ".cache" / "x").write_text("x")
    assert key(tree) == before
    # Cluster name, node sizes, node count: configure-time only.
    assert key(tree, name="other", provider__node_cpus=2, provider__node_memory_mb=2048) == before
    # A capability the node's container gets at start (the slow-node demo's tc): no role reads it, so the
    # slow-node cluster boots the same baked image as the demo (it ran the whole install phase before).
    assert key(tree, provider__net_admin=True) == before


def test_the_hash_covers_the_base_image_and_files_by_path(tree: Path) -> None:
    pins = bake.bake_pins(local_spec())
    assert pins["base_image"].startswith("localhost/gpufleet-node:bookworm-")
    files = [p.relative_to(tree).as_posix() for p in images.hashed_files(tree)]
    assert "roles/slurm/tasks/main.yml" in files and "playbooks/bake.yml" in files
    assert not [f for f in files if f.endswith(".md") or "/tests/" in f]
    # Moving content between files changes the key even when the bytes are the same.
    one = tree / "roles" / "common" / "defaults" / "main.yml"
    two = tree / "roles" / "mpi" / "defaults" / "main.yml"
    before = key(tree)
    text_one, text_two = one.read_text(), two.read_text()
    one.write_text(text_two)
    two.write_text(text_one)
    assert key(tree) != before


def image(ref: str, digest: str, used_by: tuple[str, ...] = ()) -> bake.BakedImage:
    return bake.BakedImage(ref, "f" * 64, digest, "base", "2026-11-23T12:00:00+00:00", 1, {}, used_by)


def test_images_are_named_by_ref_tag_or_hash_prefix() -> None:
    one = image("localhost/gpufleet-baked:bookworm-aaaaaaaaaaaa", "a" * 64)
    two = image("localhost/gpufleet-baked:bookworm-abbbbbbbbbbb", "ab" + "b" * 62)
    for name in ("localhost/gpufleet-baked:bookworm-aaaaaaaaaaaa", "bookworm-aaaaaaaaaaaa", "aaaaaa"):
        assert bake.resolve([one, two], name) is one
    with pytest.raises(ProvisionError, match="no baked image named"):
        bake.resolve([one, two], "cccccc")
    with pytest.raises(ProvisionError, match="matches 2 baked images"):
        bake.resolve([one, image("localhost/x:y", "a" * 64)], "aaaaaa")
    with pytest.raises(ProvisionError, match="no baked image"):
        bake.resolve([one], "aaa")  # too short to be a hash prefix


class FakePodman:
    """podman's JSON for one baked image and one container of cluster ``busy`` made from it."""

    def __init__(self, containers: list[dict]) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.containers = containers

    def run(self, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if args[0] == "images":
            out = [
                {
                    "Id": "1" * 64,
                    "Names": ["localhost/gpufleet-baked:bookworm-abcdefabcdef"],
                    "Size": 820_000_000,
                    "Labels": {bake.KIND_LABEL: "baked", bake.HASH_LABEL: "abcdef" + "0" * 58},
                }
            ]
        elif args[0] == "ps":
            out = self.containers
        else:
            out = []
        return subprocess.CompletedProcess(args, 0, json.dumps(out), "")


def test_delete_refuses_an_image_a_cluster_runs_from() -> None:
    podman = FakePodman([{"ImageID": "1" * 64, "Labels": {"gpufleet.cluster": "busy"}}])
    with pytest.raises(ProvisionError, match="in use by cluster\\(s\\) busy"):
        bake.delete_image(podman, "abcdef")  # type: ignore[arg-type]
    assert not [call for call in podman.calls if call[0] == "rmi"]


def test_delete_removes_an_unused_image_by_id() -> None:
    podman = FakePodman([{"ImageID": "2" * 64, "Labels": {"gpufleet.cluster": "elsewhere"}}])
    deleted = bake.delete_image(podman, "bookworm-abcdefabcdef")  # type: ignore[arg-type]
    assert deleted.digest.startswith("abcdef")
    assert podman.calls[-1] == ("rmi", "1" * 64)


def test_configure_trusts_a_recorded_hash_only_while_current() -> None:
    spec = local_spec()
    current = baker.spec_hash(spec)
    assert baker.baked_and_current(spec, current) == current
    assert baker.baked_and_current(spec, "0" * 64) is None
    assert baker.baked_and_current(spec, None) is None
    assert baker.baked_and_current(spec, "") is None
    pinned = local_spec(software__nccl_tests="2.19.5")
    assert baker.baked_and_current(pinned, current) is None


def test_a_pin_change_rebuilds_and_the_same_pins_reuse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpufleet.bake import local as builder

    store: dict[str, bake.BakedImage] = {}
    baked: list[str] = []

    def fake_bake(spec, podman, reporter, *, base, ref, digest, pins) -> None:
        baked.append(ref)
        store[digest] = image(ref, digest)

    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(builder, "Podman", lambda _dir: object())
    monkeypatch.setattr(builder, "ensure_node_image", lambda *a, **k: ("localhost/gpufleet-node:x", True))
    monkeypatch.setattr(builder.bake, "find_image", lambda _podman, digest: store.get(digest))
    monkeypatch.setattr(builder, "_bake", fake_bake)
    from gpufleet.progress import SilentReporter

    first = builder.LocalBaker().build(local_spec(), SilentReporter())
    again = builder.LocalBaker().build(local_spec(name="other"), SilentReporter())
    pinned = builder.LocalBaker().build(local_spec(software__nccl_tests="2.19.5"), SilentReporter())
    assert (first.built, again.built, pinned.built) == (True, False, True)
    assert again.image is first.image and pinned.image.digest != first.image.digest
    assert baked == [first.image.ref, pinned.image.ref]


def test_the_image_validation_runs_in_does_not_key_the_baked_image(tree: Path) -> None:
    # software.container_image is staged by configure (roles/containers), never baked: a cluster that names
    # an image boots the same baked node image as one that does not; software.containers is installed.
    before = key(tree)
    assert key(tree, software__container_image="/srv/images/job.sqsh") == before
    assert key(tree, software__containers=False) != before
