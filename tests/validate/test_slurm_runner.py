"""Command lines for Slurm (srun, sinfo, scontrol), the per-fabric environment and the runner."""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from pathlib import Path

from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.validate.slurm import (
    DEFAULT_NCCL_ENV_FILE,
    NO_ENV_FILE_EXIT,
    NodeEnvironment,
    SlurmRunner,
    Sweep,
    TaskEnvironment,
    collective_command,
    drain_command,
    health_command,
    parse_env_reports,
    parse_health_output,
)


def test_collective_command_sources_the_node_env_file_inside_each_task():
    command = collective_command(
        "all_reduce",
        ["gpu-0", "gpu-1"],
        gpus_per_node=8,
        bindir="/opt/nccl-tests/build/",
        sweep=Sweep(min_bytes=8, max_bytes=16 << 30, iterations=20, warmup_iterations=5),
    )
    argv = shlex.split(command)
    assert argv[:11] == [
        "srun", "--mpi=pmix", "-N", "2", "--ntasks-per-node=8", "--gpus-per-node=8",
        "--nodelist=gpu-0,gpu-1", "--exclusive", "--immediate=120", "--kill-on-bad-exit=1", "bash",
    ]  # fmt: skip
    assert argv[11] == "-c"
    script = argv[12]
    assert script.startswith("{ . /etc/gpufleet/nccl.env || ")
    # gpufleet's only additions come after the file, so they win; the task then becomes the binary
    assert script.index("export NCCL_DEBUG=INFO") > script.index(". /etc/gpufleet/nccl.env")
    assert "export NCCL_DEBUG_SUBSYS=INIT,NET" in script
    assert script.endswith('exec "$0" "$@"')
    assert argv[13:] == [
        "/opt/nccl-tests/build/all_reduce_perf",
        *["-b", "8", "-e", "17179869184", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1"],
    ]
    assert "FI_PROVIDER" not in command and "NCCL_SOCKET_IFNAME" not in command  # the file has them


def test_cpu_cluster_runs_one_task_per_node():
    command = collective_command("all_gather", ["demo-compute-0", "demo-compute-1"], gpus_per_node=0)
    argv = shlex.split(command)
    assert "--ntasks-per-node=1" in argv and not any(a.startswith("--gpus-per-node") for a in argv)
    assert argv[-15] == "/opt/nccl-tests/build/all_gather_perf"


def test_the_env_file_path_comes_from_the_caller_and_is_quoted():
    environment = TaskEnvironment(env_file="/srv/my env/nccl.env")
    script = shlex.split(collective_command("all_reduce", ["a"], gpus_per_node=8, environment=environment))[
        12
    ]
    assert script.startswith("{ . '/srv/my env/nccl.env' || ")


def _run_task(script: str, env_file: Path, localid: str) -> subprocess.CompletedProcess[str]:
    """Run the task script for real, with ``env`` as the task binary, as srun would on one node."""
    script = script.replace(DEFAULT_NCCL_ENV_FILE, str(env_file))
    return subprocess.run(
        ["bash", "-c", script, "env"],
        env={"PATH": os.environ["PATH"], "SLURMD_NODENAME": "gpu-7", "SLURM_LOCALID": localid},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_task_sees_the_file_and_reports_it_once_per_node(tmp_path: Path):
    env_file = tmp_path / "nccl.env"
    env_file.write_text(
        "export GPUFLEET_FABRIC=efa\nexport GPUFLEET_TRANSPORT=OFI\nexport FI_PROVIDER=efa\n"
        "export NCCL_DEBUG=WARN\n"
    )
    script = shlex.split(collective_command("all_reduce", ["gpu-7"], gpus_per_node=8))[12]
    first = _run_task(script, env_file, "0")
    assert first.returncode == 0, first.stderr
    seen = dict(line.split("=", 1) for line in first.stdout.splitlines() if "=" in line)
    assert seen["FI_PROVIDER"] == "efa" and seen["NCCL_DEBUG"] == "INFO"  # gpufleet's debug level wins
    reports = parse_env_reports(first.stderr)
    assert reports == {"gpu-7": NodeEnvironment("gpu-7", "efa", "OFI", str(env_file))}
    assert parse_env_reports(_run_task(script, env_file, "3").stderr) == {}  # one report per node


def test_a_node_without_the_file_fails_its_task(tmp_path: Path):
    script = shlex.split(collective_command("all_reduce", ["gpu-7"], gpus_per_node=8))[12]
    done = _run_task(script, tmp_path / "absent.env", "0")
    assert done.returncode == NO_ENV_FILE_EXIT
    assert "GPUFLEET_NCCL_ENV host=gpu-7 missing" in done.stderr and "FI_PROVIDER" not in done.stdout


def test_sweep_from_spec():
    sweep = Sweep.from_spec(
        ValidationSpec(min_bytes="1M", max_bytes="8G", iterations=50, warmup_iterations=2)
    )
    assert sweep.args() == [
        "-b",
        "1048576",
        "-e",
        "8589934592",
        "-f",
        "2",
        "-g",
        "1",
        "-n",
        "50",
        "-w",
        "2",
        "-c",
        "1",
    ]


def test_health_and_drain_commands_are_quoted():
    command = health_command(["n1", "n2"], FabricKind.EFA, script="print('hi; there')")
    argv = shlex.split(command)
    assert argv[:4] == ["srun", "-N", "2", "--ntasks-per-node=1"]
    assert argv[-4:] == ["-c", "print('hi; there')", "--fabric", "efa"]
    smoke = health_command(["n1"], FabricKind.EFA, script="pass", nccl_tests_dir="/opt/nccl tests/build")
    assert shlex.split(smoke)[-4:] == ["--fabric", "efa", "--nccl-tests", "/opt/nccl tests/build"]
    drain = drain_command(["n1", "n2"], "gpufleet: busbw 3 GB/s < 36; it's slow")
    assert shlex.split(drain) == [
        "scontrol",
        "update",
        "nodename=n1,n2",
        "state=drain",
        "reason=gpufleet: busbw 3 GB/s < 36; it's slow",
    ]


def test_parse_health_output_skips_noise_and_labels():
    stdout = (
        "srun: warning: something\n"
        '0: GPUFLEET_HEALTH {"hostname": "n1", "cpus": 4}\n'
        "GPUFLEET_HEALTH {not json}\n"
        'GPUFLEET_HEALTH {"hostname": "n2", "cpus": 8}\n'
    )
    assert parse_health_output(stdout) == {
        "n1": {"hostname": "n1", "cpus": 4},
        "n2": {"hostname": "n2", "cpus": 8},
    }


class _SlowExecutor:
    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(0.05)
        with self.lock:
            self.active -= 1
        return 0, command, ""


def test_run_many_runs_jobs_side_by_side_with_narrowed_sizes():
    executor = _SlowExecutor()
    runner = SlurmRunner(executor, fabric=FabricKind.ETHERNET, gpus_per_node=0)
    runs = runner.run_many(
        [(["a", "b"], "all_reduce"), (["c", "d"], "all_reduce"), (["e"], "all_reduce")],
        min_bytes=1 << 30,
        max_bytes=1 << 30,
    )
    assert executor.peak == 3
    assert [run.nodes for run in runs] == [("a", "b"), ("c", "d"), ("e",)]
    assert all(" -b 1073741824 -e 1073741824 " in run.command for run in runs)
    assert runs[0].log == runs[0].command
