"""Validation inside the user's image (software.container_image): the staged path (the same rule as
roles/containers), pyxis's options on every collective and the training job, and a transport failure that
names the image."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from validate_fakes import FakeSlurm

from gpufleet.errors import ValidationRunError
from gpufleet.spec import parse_spec
from gpufleet.spec.model import FabricKind, TrainingCheck
from gpufleet.validate import container
from gpufleet.validate.gate import FAIL, GateConfig, judge
from gpufleet.validate.nccl_log import parse_log
from gpufleet.validate.report import JSON_NAME
from gpufleet.validate.slurm import collective_command
from gpufleet.validate.suite import run_suite
from gpufleet.validate.training_job import TrainingJob

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "nccl-tests"
SHARED = {"kind": "volume", "mount_point": "/shared"}


@pytest.mark.parametrize(
    ("image", "path"),
    [
        ("/srv/images/job.sqsh", "/shared/gpufleet/images/job.sqsh"),
        ("nvcr.io#nvidia/pytorch:25.01-py3", "/shared/gpufleet/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh"),
        ("ubuntu:24.04", "/shared/gpufleet/images/ubuntu+24.04.sqsh"),
    ],
)
def test_the_staged_path_follows_the_roles_rule(image: str, path: str) -> None:
    assert container.staged_image({"container_image": image}, SHARED) == path


def test_the_role_and_the_validation_name_the_staged_file_alike() -> None:
    role_vars = yaml.safe_load((ROOT / "roles" / "containers" / "vars" / "main.yml").read_text())
    rule = role_vars["__containers_image_name"]
    assert f"regex_replace('{container.NAME_PATTERN}', '{container.NAME_REPLACEMENT}')" in rule
    assert "~ '.sqsh'" in rule and "containers_image | basename" in rule
    assert role_vars["__containers_image_path"] == "{{ containers_image_dir }}/{{ __containers_image_name }}"
    defaults = (ROOT / "roles" / "containers" / "defaults" / "main.yml").read_text()
    assert f"mount_point ~ '/{container.IMAGE_DIR}')" in defaults


def test_no_image_runs_on_the_nodes_and_an_image_without_shared_storage_is_refused() -> None:
    assert container.staged_image({"container_image": None}, SHARED) is None
    with pytest.raises(ValidationRunError, match="no shared filesystem"):
        container.staged_image({"container_image": "/srv/job.sqsh"}, {"kind": "none"})


def test_each_rank_runs_inside_the_image_and_still_sources_the_nodes_env_file() -> None:
    image = "/shared/gpufleet/images/job.sqsh"
    argv = shlex.split(collective_command("all_reduce", ["n0", "n1"], gpus_per_node=8, container_image=image))
    task = argv.index("bash")
    assert argv[task - 2 : task] == [f"--container-image={image}", "--no-container-entrypoint"]
    assert argv[task + 2].startswith("{ . /etc/gpufleet/nccl.env || ")
    plain = shlex.split(collective_command("all_reduce", ["n0", "n1"], gpus_per_node=8))
    assert not any(arg.startswith("--container") for arg in plain)


def test_the_training_job_hands_the_image_to_train_sbatch() -> None:
    env = "/etc/gpufleet/nccl.env"
    job = TrainingJob(("n0", "n1"), 0, "/shared", "run1", env, container_image="/i/j.sqsh")
    command = job.command(TrainingCheck(), time_limit_minutes=5)
    assert "TRAIN_CONTAINER_IMAGE=/i/j.sqsh" in command
    sbatch = (ROOT / "examples" / "jobs" / "train.sbatch").read_text()
    assert "--container-image=$TRAIN_CONTAINER_IMAGE" in sbatch and "$CONTAINER bash -c" in sbatch
    plain = TrainingJob(("n0",), 0, "/shared", "run1", "/etc/gpufleet/nccl.env").command(
        TrainingCheck(), time_limit_minutes=5
    )
    assert "TRAIN_CONTAINER_IMAGE" not in plain


def test_a_socket_fallback_inside_the_image_fails_naming_the_image() -> None:
    # Real output of an MPIJob whose container ran NCCL without EFA (aws-samples/aws-do-eks, fixture 10).
    (test,) = parse_log(FIXTURES / "10-eks-socket-transport-elided.log")
    image = "/fsx/gpufleet/images/job.sqsh"
    config = GateConfig(fabric=FabricKind.EFA, require_transport=True, container_image=image)
    (check,) = [c for c in judge(test, config).checks if c.name == "transport"]
    assert check.status == FAIL
    assert "WRONG TRANSPORT: NCCL used Socket" in check.message
    assert f"inside the container image {image}" in check.message
    assert "network plugin" in check.message
    (plain,) = [c for c in judge(test, GateConfig(fabric=FabricKind.EFA)).checks if c.name == "transport"]
    assert "container image" not in plain.message


GPU_SPEC = """
name: ib
provider: {kind: baremetal, inventory: inventories/ib.yml}
node_groups:
  - {name: head, roles: [controller, login], instance_type: head}
  - {name: gpu, roles: [compute], instance_type: hgx-h100, count: 2}
fabric: infiniband
filesystem: {kind: nfs, server: 10.0.0.1, export: /export, mount_point: /shared}
software: {container_image: "nvcr.io#nvidia/pytorch:25.01-py3"}
validation:
  collectives: [all_reduce]
  min_bytes: 1M
  max_bytes: 8G
  min_busbw: {all_reduce: 20}
  find_bad_nodes: false
"""


def test_the_suite_runs_inside_the_image_and_fails_its_socket_fallback(tmp_path: Path) -> None:
    from test_validation_suite import _inventory

    spec = parse_spec(GPU_SPEC)
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    inventory = inventory.model_copy(
        update={
            "software": spec.software.model_dump(mode="json"),
            "filesystem": {"kind": "nfs", "mount_point": "/shared"},
        }
    )
    nodes = [h.name for h in inventory.compute]
    # The image's NCCL finds no IB plugin: every rank falls back to sockets, as FakeSlurm's "socket" fault.
    slurm = FakeSlurm(nodes, gpus=8, bad={node: "socket" for node in nodes})
    result = run_suite(spec, inventory, slurm, tmp_path)
    staged = "/shared/gpufleet/images/nvcr.io+nvidia+pytorch+25.01-py3.sqsh"
    collectives = [c for c in slurm.commands if c.startswith("srun --mpi=pmix")]
    assert collectives and all(f"--container-image={staged}" in c for c in collectives)
    # the node health check is the host's own, never inside the image
    assert not any("--container-image" in c for c in slurm.commands if c not in collectives)
    (verdict,) = result.verdicts
    assert not result.passed and not verdict.passed
    assert f"inside the container image {staged}" in verdict.summary
    document = json.loads((tmp_path / JSON_NAME).read_text())
    assert document["context"]["ran inside"] == staged


@pytest.mark.parametrize(
    ("spec_image", "staged", "said"),
    [
        ("/srv/images/new.sqsh", "/srv/images/old.sqsh", "the cluster staged /srv/images/old.sqsh"),
        ("/srv/images/new.sqsh", None, "the cluster has none staged"),
        (None, "/srv/images/old.sqsh", "the cluster runs its jobs in /srv/images/old.sqsh"),
    ],
)
def test_a_spec_naming_another_image_than_the_staged_one_is_refused(
    tmp_path: Path, spec_image: str | None, staged: str | None, said: str
) -> None:
    """Validation runs in the image the inventory names; a spec naming another one is refused before any job
    runs, not silently validated in the staged one (seen on the local cluster, 2026-11-24)."""
    from test_validation_suite import _inventory

    data = yaml.safe_load(GPU_SPEC)
    data["software"]["container_image"] = spec_image
    spec = parse_spec(yaml.safe_dump(data))
    inventory = _inventory(2, gpus=8, fabric=FabricKind.INFINIBAND, kind="hgx-h100")
    software = {**spec.software.model_dump(mode="json"), "container_image": staged}
    inventory = inventory.model_copy(update={"software": software, "filesystem": SHARED})
    slurm = FakeSlurm([h.name for h in inventory.compute], gpus=8)
    with pytest.raises(ValidationRunError) as error:
        run_suite(spec, inventory, slurm, tmp_path)
    assert said in error.value.message and "gpufleet configure" in (error.value.hint or "")
    assert slurm.commands == []


def test_the_spec_and_the_staged_image_alike_pass_the_check() -> None:
    container.check_same_image("/srv/images/a.sqsh", {"container_image": "/srv/images/a.sqsh"})
    container.check_same_image(None, {"container_image": None})
    container.check_same_image(None, {})
