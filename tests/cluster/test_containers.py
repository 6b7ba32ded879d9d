"""Containers on a real local cluster (issue 22): enroot and pyxis built by roles/containers into the baked
image, a squashfs image made on the host from that node image (podman export + mksquashfs, the recipe of
docs/containers.md), staged once on the shared filesystem by configure, ``srun --container-image`` across
two nodes, ``gpufleet validate`` with the collectives and the training check inside the image and its
report, and an image that lacks what the collectives need (Open MPI, which the CPU benchmark runs over on
this cluster's ethernet fabric) failing the gate with the reason.

Cluster ``ctr`` (``$GPUFLEET_E2E_NAME-ctr`` when that is set): 1 controller + 2 compute nodes, torn down
whatever happens. Needs squashfs-tools on the host (mksquashfs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_cli import GPUFLEET, ROOT, Cli, labelled, local_podman, podman

pytestmark = pytest.mark.cluster

NAME = f"{os.environ['GPUFLEET_E2E_NAME']}-ctr" if os.environ.get("GPUFLEET_E2E_NAME") else "ctr"
LABEL = f"gpufleet.cluster={NAME}"
MARKER = "/etc/gpufleet-test-image"
# Left out of the image: what no job here reads (documentation, locales, apt's lists and caches), and the
# node's Slurm spool, which a user's image does not carry: enroot's 50-slurm-pmi.sh hook mounts slurmd's
# pmix.<job>.<step> folder at the same path inside, and could not create it below the spool folder the node
# image has (owned by the slurm user there: "Permission denied", seen 2026-11-24).
EXCLUDED = [
    "usr/share/doc",
    "usr/share/locale",
    "usr/share/man",
    "var/lib/apt/lists",
    "var/cache",
    "var/lib/slurm",
]


def export_rootfs(base: str, rootfs: Path) -> None:
    """``podman export`` of a container of ``base`` into ``rootfs``, less ``EXCLUDED``."""
    rootfs.mkdir(parents=True)
    container = podman("create", base, "true")[-1]
    try:
        export = subprocess.Popen(
            ["podman", "export", container], stdout=subprocess.PIPE, env=local_podman().env
        )
        excluded = [f"--exclude={path}" for path in EXCLUDED]
        subprocess.run(["tar", "-C", str(rootfs), "-x", *excluded], stdin=export.stdout, check=True)
        assert export.wait() == 0
    finally:
        podman("rm", "-f", container)


def squash(rootfs: Path, out: Path, *excluded: str) -> None:
    """``mksquashfs`` of ``rootfs`` with a marker file naming the image (its file name's stem)."""
    (rootfs / MARKER.lstrip("/")).write_text(f"{out.stem}\n")
    leave_out = ["-wildcards", "-e", *excluded] if excluded else []
    subprocess.run(
        ["mksquashfs", str(rootfs), str(out), "-noappend", "-comp", "lz4", "-quiet", *leave_out],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, baked_image: dict
) -> Iterator[tuple[Cli, Path, Path, Path]]:
    if shutil.which("mksquashfs") is None:
        pytest.fail("the containers test makes squashfs images on the host: apt-get install squashfs-tools")
    workdir = tmp_path_factory.mktemp("containers")
    state = workdir / "state"
    good, bad = workdir / "job.sqsh", workdir / "no-mpi.sqsh"
    rootfs = workdir / "rootfs"
    export_rootfs(baked_image["name"], rootfs)
    squash(rootfs, good)
    # The same image without Open MPI's libraries (and without torch: no training runs in it): the CPU
    # benchmark cannot start inside it.
    for library in rootfs.glob("usr/lib/x86_64-linux-gnu/libmpi.so*"):
        library.unlink()
    squash(rootfs, bad, "opt/gpufleet/torch")
    shutil.rmtree(rootfs)
    spec = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    spec["name"] = NAME
    spec["software"]["container_image"] = str(good)
    spec_path = workdir / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    cli = Cli(workdir, state)
    assert not any(labelled(LABEL).values()), f"a previous run left {labelled(LABEL)}"
    try:
        yield cli, spec_path, state, bad
    finally:
        if any(labelled(LABEL).values()):
            subprocess.run(
                [GPUFLEET, "down", str(spec_path)], cwd=workdir, env=cli.env, capture_output=True, check=False
            )


def test_jobs_and_validation_run_inside_the_image(cluster) -> None:
    cli, spec, state, bad = cluster
    controller, computes = f"{NAME}-controller", [f"{NAME}-compute-0", f"{NAME}-compute-1"]
    cli("up", str(spec))
    configured = cli.json("configure", str(spec))
    assert configured["ok"] is True

    # Staged once on the shared filesystem; every node sees the same file.
    staged = "/shared/gpufleet/images/job.sqsh"
    sizes = {node: podman("exec", node, "stat", "-c", "%s", staged) for node in [controller, *computes]}
    assert len({tuple(size) for size in sizes.values()}) == 1, sizes
    assert podman("exec", computes[0], "enroot", "version") == ["4.1.2"]

    # srun --container-image across both compute nodes: each task is inside the image (its marker file,
    # absent on the nodes) and sees the node's NCCL environment (mounted from /etc/gpufleet).
    assert podman("exec", computes[0], "test", "!", "-e", MARKER) == []
    lines = podman(
        "exec", controller, "srun", "-N", "2", f"--nodelist={','.join(computes)}",
        f"--container-image={staged}", "--no-container-entrypoint", "bash", "-c",
        f'. /etc/gpufleet/nccl.env; echo "$(hostname -s) $(cat {MARKER}) $GPUFLEET_FABRIC"',
    )  # fmt: skip
    assert sorted(line for line in lines if line.startswith(NAME)) == [
        f"{node} job ethernet" for node in computes
    ]

    # The validation inside the image: collectives and the training check, with their report.
    out = state.parent / "report"
    report = cli.json("validate", str(spec), "--out", str(out))
    assert report["passed"] is True, json.dumps(report, indent=1)[:4000]
    assert report["context"]["ran inside"] == staged
    for collective in ("all_reduce", "all_gather"):
        log = (out / "logs" / f"{collective}.log").read_text()
        assert f"--container-image={staged}" in log.splitlines()[0], log[:500]
    assert report["training"]["passed"] is True, json.dumps(report["training"], indent=1)[:3000]
    assert (out / "validation-report.md").exists()

    # An image without what the collectives need fails the gate, and the report says why. Validation runs
    # in the image the cluster staged (the inventory's, written at up), so the bad image takes its place on
    # the shared filesystem; one short collective is enough for the verdict.
    podman("cp", str(bad), f"{controller}:{staged}")
    broken = yaml.safe_load(spec.read_text())
    broken["validation"].update(
        collectives=["all_reduce"], max_bytes="1M", gate_min_bytes="1M", find_bad_nodes=False
    )
    broken["validation"]["training"]["enabled"] = False
    broken_spec = spec.with_name("broken.yaml")
    broken_spec.write_text(yaml.safe_dump(broken))
    failed = cli.json("validate", str(broken_spec), "--out", str(state.parent / "broken"), expect=1)
    assert failed["passed"] is False
    reasons = json.dumps(failed["tests"])
    assert "libmpi.so" in reasons, reasons[:3000]

    down = cli.json("down", str(spec))
    assert down["leftovers"] == []
