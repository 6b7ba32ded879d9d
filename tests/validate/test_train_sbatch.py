"""examples/jobs/train.sbatch run by hand (``bash train.sbatch -N 2``), with a stand-in ``sbatch`` on PATH
that records what it was given: the job is staged on the shared filesystem and submitted from there, and its
settings reach the job without asking Slurm for the user's login environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "jobs"

# Records its arguments and the TRAIN_* part of its environment, and answers as `sbatch --parsable` does.
FAKE_SBATCH = """#!/usr/bin/env python3
import json, os, sys
seen = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("TRAIN_")}}
with open(os.environ["FAKE_SBATCH_RECORD"], "w") as handle:
    json.dump(seen, handle)
print(42)
"""


def export_asks_for_the_login_environment(value: str) -> bool:
    """sbatch(1) of Slurm 24.11 (SchedMD/slurm@slurm-24-11-5-1:doc/man/man1/sbatch.1, read 2026-11-27):
    '--export=NONE and [ALL,]<environment_variables> implicitly work as if --get-user-env was defined';
    ALL (the default) and NIL do not (src/sbatch/sbatch.c sets SLURM_GET_USER_ENV for the others)."""
    return value.upper() not in ("ALL", "NIL")


def test_run_by_hand_stages_the_job_and_passes_its_settings_without_get_user_env(tmp_path: Path) -> None:
    """On Slurm 24.11 the template's old ``--export=ALL,TRAIN_SCRIPT_DIR=...`` made slurmd on the batch node
    fetch the user's login environment in a clone(CLONE_NEWPID|CLONE_NEWNS) child, which a local cluster's
    node container may not make: slurmd exited ('fatal: clone: Operation not permitted'), the node went
    DOWN and the job never ran (tests/cluster/test_faults.py's kill test, 2026-11-27)."""
    bin_dir, shared, submit_from = tmp_path / "bin", tmp_path / "shared", tmp_path / "elsewhere"
    for folder in (bin_dir, shared, submit_from):
        folder.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    record = tmp_path / "sbatch.json"
    job_dir = shared / "jobs" / "recovery"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "TRAIN_"))},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_SBATCH_RECORD": str(record),
        "TRAIN_SHARED_DIR": str(shared),
        "TRAIN_JOB_DIR": str(job_dir),
        "TRAIN_STEPS": "60",
    }
    done = subprocess.run(
        ["bash", str(TEMPLATE / "train.sbatch"), "-N", "2"],
        cwd=submit_from,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    said = f"submitted job 42 from {job_dir}; its output: {job_dir}/train-42.out"
    assert done.stdout.strip() == said, done.stdout
    for name in ("train.sbatch", "train_ddp.py"):
        assert (job_dir / name).read_bytes() == (TEMPLATE / name).read_bytes(), name

    seen = json.loads(record.read_text())
    argv: list[str] = seen["argv"]
    exports = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--export=")]
    assert exports and not any(export_asks_for_the_login_environment(e) for e in exports), argv
    # The settings reach the job through sbatch's own environment (--export=ALL carries it whole).
    assert seen["env"]["TRAIN_SCRIPT_DIR"] == str(job_dir), seen["env"]
    assert seen["env"]["TRAIN_STEPS"] == "60", seen["env"]
    assert f"--chdir={job_dir}" in argv and f"--output={job_dir}/train-%j.out" in argv, argv
    # The user's own sbatch options come after the template's (the last of an option wins), the script last.
    assert argv[-3:] == ["-N", "2", f"{job_dir}/train.sbatch"], argv
