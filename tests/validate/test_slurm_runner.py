"""Command lines for Slurm (srun, sinfo, scontrol), the per-fabric environment and the runner."""

from __future__ import annotations

import shlex
import threading
import time

import pytest

from gpufleet.spec.model import FabricKind, ValidationSpec
from gpufleet.validate.slurm import (
    FabricEnvironment,
    SlurmRunner,
    Sweep,
    collective_command,
    drain_command,
    fabric_environment,
    health_command,
    parse_health_output,
)


def test_collective_command_for_an_efa_cluster():
    environment = fabric_environment(
        FabricKind.EFA, "p5.48xlarge", {"LD_LIBRARY_PATH": "/opt/amazon/efa/lib"}
    )
    command = collective_command(
        "all_reduce",
        ["gpu-0", "gpu-1"],
        gpus_per_node=8,
        bindir="/opt/nccl-tests/build/",
        sweep=Sweep(min_bytes=8, max_bytes=16 << 30, iterations=20, warmup_iterations=5),
        environment=environment,
    )
    assert command == (
        "env FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
        "LD_LIBRARY_PATH=/opt/amazon/efa/lib "
        "srun --mpi=pmix -N 2 --ntasks-per-node=8 --gpus-per-node=8 --nodelist=gpu-0,gpu-1 --exclusive "
        "--immediate=120 --kill-on-bad-exit=1 "
        "/opt/nccl-tests/build/all_reduce_perf -b 8 -e 17179869184 -f 2 -g 1 -n 20 -w 5 -c 1"
    )


def test_cpu_cluster_runs_one_task_per_node_with_the_inventory_env():
    local_env = {"OMPI_MCA_btl": "vader,tcp,self", "OMPI_MCA_btl_tcp_if_include": "eth0"}
    environment = fabric_environment(FabricKind.ETHERNET, "local", local_env)
    command = collective_command(
        "all_gather", ["demo-compute-0", "demo-compute-1"], gpus_per_node=0, environment=environment
    )
    argv = shlex.split(command)
    assert "--ntasks-per-node=1" in argv and not any(a.startswith("--gpus-per-node") for a in argv)
    assert "OMPI_MCA_btl=vader,tcp,self" in argv and "NCCL_DEBUG=INFO" in argv
    assert argv[-15] == "/opt/nccl-tests/build/all_gather_perf"


def test_inventory_env_wins_over_the_fabric_defaults():
    environment = fabric_environment(FabricKind.EFA, "p5.48xlarge", {"NCCL_DEBUG": "TRACE", "X": 3})
    assert environment.env["NCCL_DEBUG"] == "TRACE" and environment.env["X"] == "3"


@pytest.mark.parametrize(
    ("instance_type", "rdma"),
    [("p5.48xlarge", True), ("p4d.24xlarge", True), ("g5.48xlarge", False), (None, False)],
)
def test_efa_device_rdma_only_where_it_applies(instance_type, rdma):
    assert ("FI_EFA_USE_DEVICE_RDMA" in fabric_environment(FabricKind.EFA, instance_type).env) is rdma


def test_tcpx_bindings_survive_quoting():
    environment = fabric_environment(FabricKind.TCPX, "a3-highgpu-8g")
    command = collective_command("all_reduce", ["a", "b"], gpus_per_node=8, environment=environment)
    argv = shlex.split(command)
    bindings = next(a for a in argv if a.startswith("NCCL_GPUDIRECTTCPX_TX_BINDINGS="))
    assert bindings.endswith("enp134s0:60-73,164-177;enp140s0:60-73,164-177")


def test_tcpxo_sources_the_plugin_profile_inside_each_task_and_keeps_our_env():
    environment = fabric_environment(FabricKind.TCPXO, "a3-megagpu-8g")
    command = collective_command("all_gather", ["a", "b"], gpus_per_node=8, environment=environment)
    argv = shlex.split(command)
    assert argv[0] == "srun"
    bash = argv.index("bash")
    assert argv[bash + 1] == "-c"
    script = argv[bash + 2]
    assert script.startswith(
        "export NCCL_LIB_DIR=/var/lib/tcpxo/lib64; source /var/lib/tcpxo/lib64/nccl-env-profile.sh; "
    )
    # our settings come after the profile, so NCCL_DEBUG=INFO survives a profile that sets WARN
    assert script.index("export NCCL_DEBUG=INFO") > script.index("source ")
    assert script.endswith('exec "$0" "$@"')
    assert argv[bash + 3] == "/opt/nccl-tests/build/all_gather_perf"


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
    runner = SlurmRunner(
        executor, fabric=FabricKind.ETHERNET, gpus_per_node=0, environment=FabricEnvironment({})
    )
    runs = runner.run_many(
        [(["a", "b"], "all_reduce"), (["c", "d"], "all_reduce"), (["e"], "all_reduce")],
        min_bytes=1 << 30,
        max_bytes=1 << 30,
    )
    assert executor.peak == 3
    assert [run.nodes for run in runs] == [("a", "b"), ("c", "d"), ("e",)]
    assert all(" -b 1073741824 -e 1073741824 " in run.command for run in runs)
    assert runs[0].log == runs[0].command
