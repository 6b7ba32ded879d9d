"""Submit the training check's job: examples/jobs/train.sbatch and train_ddp.py, exactly as users copy them.

``TrainingJob.command`` builds one login-node shell command that writes both files into a fresh folder on the
shared filesystem (``<mount>/.gpufleet/training/<run>``; the nodes read the script from there), submits
train.sbatch with ``sbatch --wait`` on the given nodes, with the run's settings in the environment sbatch
passes on (``TRAIN_*``: steps, checkpoint folder and interval, join timeout, no requeue), then prints the
job's output file and exits with sbatch's exit code. The checkpoint folder is removed afterwards unless
``keep`` (it holds the model, which is small, but a check must not fill the filesystem).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import ValidationRunError
from gpufleet.inventory.model import TORCH_VENV
from gpufleet.spec.model import TrainingCheck

SBATCH = "train.sbatch"
SCRIPT = "train_ddp.py"
SETUP_EXIT = 98  # the login node could not write the job's files to the shared filesystem


def job_dir() -> Path:
    """examples/jobs/ of this checkout (the template the check runs and users copy)."""
    from gpufleet.paths import project_root

    folder = project_root() / "examples" / "jobs"
    if not (folder / SBATCH).is_file() or not (folder / SCRIPT).is_file():
        raise ValidationRunError(
            f"the training job template is missing from {folder} ({SBATCH}, {SCRIPT})",
            hint="run gpufleet from a complete checkout (GPUFLEET_HOME), or set "
            "validation.training.enabled: false",
        )
    return folder


@dataclass(frozen=True)
class TrainingJob:
    nodes: tuple[str, ...]
    gpus_per_node: int
    mount_point: str
    run_id: str
    env_file: str
    venv: str = TORCH_VENV
    keep: bool = False
    # The staged image the job's step runs inside (train.sbatch's TRAIN_CONTAINER_IMAGE); None: on the node.
    container_image: str | None = None

    @property
    def folder(self) -> str:
        return f"{self.mount_point.rstrip('/')}/.gpufleet/training/{self.run_id}"

    def command(
        self, config: TrainingCheck, *, time_limit_minutes: int, templates: Path | None = None
    ) -> str:
        if not self.nodes:
            raise ValueError("the training job needs at least one node")
        source = templates or job_dir()
        folder = shlex.quote(self.folder)
        steps = [f"mkdir -p {folder}/checkpoints"]
        for name in (SBATCH, SCRIPT):
            encoded = base64.b64encode((source / name).read_bytes()).decode()
            steps.append(f"echo {encoded} | base64 -d > {folder}/{name}")
        settings = {
            "TRAIN_SCRIPT_DIR": self.folder,
            "TRAIN_CHECKPOINT_DIR": f"{self.folder}/checkpoints",
            "TRAIN_STEPS": str(config.steps),
            "TRAIN_CHECKPOINT_EVERY": str(config.checkpoint_every),
            "TRAIN_JOIN_TIMEOUT": str(int(config.join_timeout.total_seconds())),
            "TRAIN_MAX_REQUEUES": "0",
            "TRAIN_NCCL_ENV": self.env_file,
            "TRAIN_TORCH_VENV": self.venv,
            # Long events in short parts: Slurm forwards output in 1 KiB messages (train_ddp.py's emit).
            "TRAIN_EVENT_PARTS": "1",
        }
        if self.container_image:
            settings["TRAIN_CONTAINER_IMAGE"] = self.container_image
        sbatch = [
            "sbatch",
            "--wait",
            "--parsable",
            "-N",
            str(len(self.nodes)),
            f"--nodelist={','.join(self.nodes)}",
            "--ntasks-per-node=1",  # one torchrun per node; it starts one worker per GPU
            f"--time={max(time_limit_minutes, 1)}",
            f"--output={self.folder}/job.out",
            "--no-requeue",
        ]
        if self.gpus_per_node > 0:
            sbatch.append(f"--gpus-per-node={self.gpus_per_node}")
        sbatch.append(f"{self.folder}/{SBATCH}")
        exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in settings.items())
        setup = " && ".join(steps)
        steps = [
            f"{{ {setup}; }} || "
            f"{{ echo 'cannot write the training job to {self.folder}' >&2; exit {SETUP_EXIT}; }}",
            f"cd {folder} && env {exports} {shlex.join(sbatch)}; rc=$?",
        ]
        steps.append(f"cat {folder}/job.out 2>/dev/null")
        if not self.keep:
            steps.append(f"rm -rf {folder}/checkpoints")
        steps.append("exit $rc")
        return "; ".join(steps)
