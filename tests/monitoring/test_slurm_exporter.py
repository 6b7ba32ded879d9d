"""The Slurm/job exporter against Slurm's output formats (tests/monitoring/data/slurm/README.md) and a
/proc shaped like Linux's (proc(5): /proc/PID/stat fields 14, 15 and 22; environ NUL-separated)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import source_tree
from gpufleet.node import slurm_exporter as ex

DATA = Path(__file__).parent / "data" / "slurm"


def samples(collector: object) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def runner(jobs: str, nodes: str) -> ex.Runner:
    def run(argv: list[str]) -> str:
        if argv == ex.JOB_COMMAND:
            return (DATA / jobs).read_text()
        if argv == ex.NODE_COMMAND:
            return (DATA / nodes).read_text()
        raise AssertionError(f"unexpected command {argv}")

    return run


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu-[01-02]", ["gpu-01", "gpu-02"]),
        ("n[1-3,7],ctl", ["n1", "n2", "n3", "n7", "ctl"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("single", ["single"]),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert ex.expand_hostlist(text) == hosts


def test_jobs_nodes_and_gpus_from_a_gpu_cluster() -> None:
    got = samples(ex.SlurmCollector(runner("scontrol-show-job-d-o.gpu.txt", "sinfo-N.gpu.txt")))
    assert got["slurm_exporter_up"] == [({}, 1.0)]
    info = {s[0]["jobid"]: s[0] for s in got["slurm_job_info"]}
    assert info["4711"] == {
        "jobid": "4711",
        "name": "train llama",
        "user": "alice",
        "state": "RUNNING",
        "partition": "gpu",
    }
    assert info["4713"]["state"] == "PENDING" and info["4700"]["state"] == "COMPLETED"
    held = sorted((s[0]["jobid"], s[0]["node"]) for s in got["slurm_job_node"])
    assert held == [("4711", "gpu-01"), ("4711", "gpu-02"), ("4712", "gpu-03")]
    gpus = sorted((s[0]["jobid"], s[0]["node"], int(s[0]["gpu"])) for s in got["slurm_job_gpu"])
    assert gpus == sorted(
        [("4711", n, i) for n in ("gpu-01", "gpu-02") for i in range(8)]
        + [("4712", "gpu-03", 2), ("4712", "gpu-03", 5)]
    )
    assert all(s[0]["simulated"] == "false" for s in got["slurm_job_gpu"])
    assert dict((s[0]["state"], s[1]) for s in got["slurm_jobs"]) == {
        "RUNNING": 2,
        "PENDING": 1,
        "COMPLETED": 1,
    }
    states = {s[0]["node"]: s[0]["state"] for s in got["slurm_node_state"]}
    assert states == {
        "gpu-01": "allocated",
        "gpu-02": "allocated",
        "gpu-03": "mixed",
        "gpu-04": "idle",
        "gpu-05": "down*",
    }
    assert {s[0]["node"]: s[1] for s in got["slurm_node_gpus"]}["gpu-05"] == 8


def test_local_nodes_get_simulated_gpus_only_when_asked() -> None:
    plain = samples(ex.SlurmCollector(runner("scontrol-show-job-d-o.local.txt", "sinfo-N.local.txt")))
    assert plain.get("slurm_job_gpu", []) == []
    assert sorted(s[0]["node"] for s in plain["slurm_job_node"]) == ["gf-compute-0", "gf-compute-1"]
    sim = samples(
        ex.SlurmCollector(runner("scontrol-show-job-d-o.local.txt", "sinfo-N.local.txt"), simulated_gpus=1)
    )
    assert sorted((s[0]["node"], s[0]["gpu"], s[0]["simulated"]) for s in sim["slurm_job_gpu"]) == [
        ("gf-compute-0", "0", "true"),
        ("gf-compute-1", "0", "true"),
    ]


def test_slurm_not_answering_is_up_0_not_a_crash() -> None:
    def broken(argv: list[str]) -> str:
        raise RuntimeError("scontrol exited 1: slurm_load_jobs error: Unable to contact slurm controller")

    got = samples(ex.SlurmCollector(broken))
    assert got == {"slurm_exporter_up": [({}, 0.0)]}


def test_no_jobs() -> None:
    def run(argv: list[str]) -> str:
        return (
            "No jobs in the system\n" if argv == ex.JOB_COMMAND else (DATA / "sinfo-N.local.txt").read_text()
        )

    got = samples(ex.SlurmCollector(run))
    assert "slurm_job_node" not in got and len(got["slurm_node_state"]) == 2


# ---- the node side: /proc ------------------------------------------------------------------------------


def fake_proc(
    root: Path, pid: int, comm: str, env: dict[str, str], utime: int, stime: int, start: int
) -> None:
    """/proc/PID as Linux writes it: stat is 'pid (comm) state ppid ...' (proc(5)); environ NUL-separated."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    rest = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "100", "0", "0", "0"]
    rest += [str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start), "12345678", "300"]
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(rest) + "\n")


def test_read_procs_finds_the_jobs_processes(tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    fake_proc(tmp_path, 101, "python (rank 0)", {"PATH": "/bin", "SLURM_JOB_ID": "42"}, 3 * ticks, ticks, 500)
    fake_proc(tmp_path, 102, "sshd", {"PATH": "/bin"}, 50, 50, 10)
    fake_proc(tmp_path, 103, "all_reduce_perf", {"SLURM_JOB_ID": "43", "SLURM_JOB_ID_X": "9"}, ticks, 0, 600)
    (tmp_path / "self").mkdir()
    procs = sorted(ex.read_procs(tmp_path), key=lambda p: p.pid)
    assert [(p.pid, p.jobid, p.cpu_seconds, p.start) for p in procs] == [
        (101, "42", 4.0, 500),
        (103, "43", 1.0, 600),
    ]


def test_job_cpu_only_grows_when_a_process_exits() -> None:
    cpu = ex.JobCpu()
    cpu.update([ex.Proc(1, 10, "7", 5.0), ex.Proc(2, 11, "7", 2.0)])
    assert cpu.totals["7"] == 7.0
    counts = cpu.update([ex.Proc(1, 10, "7", 6.0)])  # pid 2 exited
    assert cpu.totals["7"] == 8.0 and counts == {"7": 1}
    cpu.update([ex.Proc(1, 99, "7", 0.5)])  # pid 1 reused by a new process of the job
    assert cpu.totals["7"] == 8.5


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_node_collector_progress_processes_heartbeat_and_stand_in(tmp_path: Path) -> None:
    procs = [ex.Proc(1, 10, "42", 10.0)]
    clock = Clock()
    beats = tmp_path / "hb"
    beats.mkdir()
    (beats / "42").touch()
    os.utime(beats / "42", (1_700_000_000, 1_700_000_000))
    col = ex.NodeJobsCollector("n1", procs=lambda: procs, simulated_gpus=2, clock=clock, heartbeat_dir=beats)
    first = samples(col)
    assert first["gpufleet_job_cpu_seconds_total"] == [({"jobid": "42", "node": "n1"}, 10.0)]
    assert first["gpufleet_job_processes"] == [({"jobid": "42", "node": "n1"}, 1.0)]
    assert first["gpufleet_job_heartbeat_timestamp_seconds"] == [
        ({"jobid": "42", "node": "n1"}, 1_700_000_000.0)
    ]
    clock.now += 10
    procs = [ex.Proc(1, 10, "42", 20.0)]  # one CPU busy for 10 s: 2 stand-in GPUs at 1 CPU each -> 0.5
    second = samples(col)
    sm = second["DCGM_FI_PROF_SM_ACTIVE"]
    assert [s[1] for s in sm] == [0.5, 0.5]
    assert all(
        s[0]["simulated"] == "true" and s[0]["hpc_job"] == "42" and s[0]["Hostname"] == "n1" for s in sm
    )
    assert sorted(s[0]["gpu"] for s in sm) == ["0", "1"]
    clock.now += 10
    procs = []  # the job is gone: idle, and no series for it
    third = samples(col)
    assert [s[1] for s in third["DCGM_FI_PROF_SM_ACTIVE"]] == [0.0, 0.0]
    assert third.get("gpufleet_job_cpu_seconds_total", []) == []


def test_node_collector_without_simulation_emits_no_dcgm_series() -> None:
    got = samples(
        ex.NodeJobsCollector(
            "n1", procs=lambda: [ex.Proc(1, 1, "5", 1.0)], heartbeat_dir=Path("/nonexistent")
        )
    )
    assert not [name for name in got if name.startswith("DCGM_")]


@pytest.mark.parametrize(
    ("nvidia", "container", "refused"),
    [
        (True, True, "has an NVIDIA device"),
        (False, False, "not a gpufleet local (podman) node"),
        (False, True, None),
    ],
)
def test_stand_in_refused_on_gpu_and_non_local_nodes(
    monkeypatch: pytest.MonkeyPatch, nvidia: bool, container: bool, refused: str | None
) -> None:
    monkeypatch.setattr(ex, "has_nvidia_device", lambda: nvidia)
    monkeypatch.setattr(ex, "in_local_container", lambda: container)
    if refused is None:
        ex.refuse_simulation_here()
    else:
        with pytest.raises(ex.SimulationRefused, match=re.escape(refused)):
            ex.refuse_simulation_here()


def test_main_refuses_the_stand_in_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ex, "has_nvidia_device", lambda: False)
    monkeypatch.setattr(ex, "in_local_container", lambda: False)
    assert ex.main(["--mode", "node", "--port", "0", "--simulate-dcgm", "1"]) == 2
    assert "never runs on a cloud or bare-metal node" in capsys.readouterr().err


def test_the_exporter_is_one_file_that_needs_only_prometheus_client() -> None:
    """The role copies the file to the nodes, where gpufleet is not installed."""
    import ast

    tree = source_tree.parse(Path(ex.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "gpufleet" not in imported and "prometheus_client" in imported
