#!/usr/bin/env python3
"""gpufleet's Slurm/job exporter: one file, Python 3 and prometheus_client only (Debian's
python3-prometheus-client on the nodes), so the monitoring role copies it as it is (like node_health.py).

Two modes, one systemd unit each (roles/monitoring):

``--mode slurm`` (the controller, port 9341): what Slurm says, read at each scrape.
  ``scontrol -o show job -d`` gives every job with its per-node detail (``Nodes=<hostlist> CPU_IDs=..
  Mem=.. GRES=gpu[:type]:<n>(IDX:<list>)``); ``sinfo -N -h -o '%N|%T|%G'`` every node, its state and GRES.
  Series: slurm_job_info{jobid,name,user,state,partition}, slurm_job_node{jobid,node} (the job holds the
  node), slurm_job_gpu{jobid,node,gpu} (the job holds that GPU index), slurm_job_cpus{jobid},
  slurm_jobs{state}, slurm_node_state{node,state}, slurm_node_gpus{node}, slurm_exporter_up.
  With ``--simulated-gpus N`` (the local backend, whose nodes have no GPU), a job holding a node that has
  no GPU GRES holds GPUs 0..N-1 of it, labelled simulated="true".

``--mode node`` (every compute node, port 9342): the jobs' processes on this node, from /proc.
  A process belongs to the job whose SLURM_JOB_ID is in its environment (slurmstepd sets it for every task
  and batch script). Series: gpufleet_job_cpu_seconds_total{jobid,node} (user+system CPU time, summed per
  process as it grows, so it never falls when a process exits: the job's progress), gpufleet_job_processes
  {jobid,node}, gpufleet_job_heartbeat_timestamp_seconds{jobid,node} (the mtime of
  /run/gpufleet/heartbeat/<jobid>, for jobs that touch it once per step).
  With ``--simulate-dcgm N`` (the local backend only): DCGM-named series for N stand-in GPUs, from the
  CPU use of the job holding the node, every series labelled simulated="true". It refuses to start where
  an NVIDIA device exists or outside a container (no /run/.containerenv): never on a cloud or bare-metal
  node.

Formats: SchedMD's own testsuite reads the per-node GRES detail as ``GRES=gpu:1(IDX:0)`` and
``GRES=gpu:2(IDX:0-1)`` (SchedMD/slurm testsuite/python/tests/test_121_1.py and testsuite/expect/test39.19,
read 2026-11-24); typed GPUs read ``gpu:a100:2(IDX:0-1)``.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY

Runner = Callable[[list[str]], str]

JOB_COMMAND = ["scontrol", "-o", "show", "job", "-d"]
NODE_COMMAND = ["sinfo", "-N", "-h", "-o", "%N|%T|%G"]
HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED"})
HEARTBEAT_DIR = Path("/run/gpufleet/heartbeat")


# ---- Slurm's output ------------------------------------------------------------------------------------


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax: ``n[1-3,7],gpu-[01-02]x,ctl`` (zero padding kept)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", text):
        if not part:
            continue
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not match:
            hosts.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for item in ranges.split(","):
            low, _, high = item.partition("-")
            if not high:
                hosts.extend(expand_hostlist(prefix + low + suffix))
                continue
            for number in range(int(low), int(high) + 1):
                hosts.extend(expand_hostlist(f"{prefix}{number:0{len(low)}d}{suffix}"))
    return hosts


def expand_indexes(text: str) -> list[str]:
    """GRES indexes ``0-1,4`` -> ['0', '1', '4']."""
    out: list[str] = []
    for item in text.split(","):
        low, _, high = item.partition("-")
        out.extend(str(i) for i in range(int(low), int(high or low) + 1))
    return out


@dataclass
class Job:
    jobid: str
    name: str
    user: str
    state: str
    partition: str
    cpus: int
    nodes: list[str]
    gpus: dict[str, list[str]] = field(default_factory=dict)  # node -> GPU indexes


_FIELD = r"(?:^|\s){key}=(\S*)"
# A job name may hold spaces; it ends where the next field (UserId=) starts.
_NAME = re.compile(r"\bJobName=(.*?)\s+UserId=")
_DETAIL = re.compile(r"\bNodes=(\S+)\s+CPU_IDs=\S*\s+Mem=\S*\s+GRES=(\S*)")
_GPU_IDX = re.compile(r"gpu(?::[^:(]+)?(?::\d+)?\(IDX:([^)]*)\)")


def _field(line: str, key: str) -> str:
    match = re.search(_FIELD.format(key=re.escape(key)), line)
    return match.group(1) if match else ""


def parse_jobs(text: str) -> list[Job]:
    """``scontrol -o show job -d``: one line per job (``No jobs in the system`` when there are none)."""
    jobs: list[Job] = []
    for line in text.splitlines():
        jobid = _field(line, "JobId")
        if not jobid:
            continue
        name = _NAME.search(line)
        user = _field(line, "UserId").split("(")[0]
        nodelist = _field(line, "NodeList")
        job = Job(
            jobid=jobid,
            name=name.group(1) if name else "",
            user=user,
            state=_field(line, "JobState"),
            partition=_field(line, "Partition"),
            cpus=int(_field(line, "NumCPUs") or 0),
            nodes=expand_hostlist(nodelist) if nodelist and nodelist != "(null)" else [],
        )
        for nodes, gres in _DETAIL.findall(line):
            idx = _GPU_IDX.search(gres)
            if idx and idx.group(1) not in ("", "N/A"):
                for node in expand_hostlist(nodes):
                    job.gpus[node] = expand_indexes(idx.group(1))
        jobs.append(job)
    return jobs


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gpus: int


def parse_gres_gpus(gres: str) -> int:
    """``gpu:8``, ``gpu:h100:8(S:0-1)``, ``gpu:a:2,gpu:b:2``, ``(null)`` -> the GPU count."""
    total = 0
    for part in gres.split(","):
        match = re.match(r"gpu(?::[^:(,]+)?:(\d+)", part.strip())
        if match:
            total += int(match.group(1))
    return total


def parse_nodes(text: str) -> list[Node]:
    """``sinfo -N -h -o '%N|%T|%G'``: a node in several partitions is listed once per partition."""
    seen: dict[str, Node] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        seen.setdefault(parts[0], Node(parts[0], parts[1], parse_gres_gpus(parts[2])))
    return list(seen.values())


def run_command(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


class SlurmCollector:
    """What Slurm says about jobs and nodes, read at each scrape."""

    def __init__(self, run: Runner = run_command, simulated_gpus: int = 0) -> None:
        self.run = run
        self.simulated_gpus = simulated_gpus

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("slurm_exporter_up", "1 when squeue/scontrol/sinfo answered at this scrape")
        try:
            jobs = parse_jobs(self.run(JOB_COMMAND))
            nodes = parse_nodes(self.run(NODE_COMMAND))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"gpufleet-slurm-exporter: {exc}", file=sys.stderr)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from self._jobs(jobs, {n.name: n for n in nodes})
        yield from self._nodes(nodes)

    def _jobs(self, jobs: list[Job], nodes: dict[str, Node]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "slurm_job_info", "a Slurm job (1)", labels=["jobid", "name", "user", "state", "partition"]
        )
        held = GaugeMetricFamily("slurm_job_node", "the job holds the node (1)", labels=["jobid", "node"])
        gpus = GaugeMetricFamily(
            "slurm_job_gpu",
            "the job holds GPU index gpu of node (1)",
            labels=["jobid", "node", "gpu", "simulated"],
        )
        cpus = GaugeMetricFamily("slurm_job_cpus", "CPUs allocated to the job", labels=["jobid"])
        counts: dict[str, int] = {}
        for job in jobs:
            info.add_metric([job.jobid, job.name, job.user, job.state, job.partition], 1)
            counts[job.state] = counts.get(job.state, 0) + 1
            if job.state not in HOLDING_STATES:
                continue
            cpus.add_metric([job.jobid], job.cpus)
            for node in job.nodes:
                held.add_metric([job.jobid, node], 1)
                indexes = job.gpus.get(node, [])
                simulated = (
                    not indexes and self.simulated_gpus > 0 and not (node in nodes and nodes[node].gpus)
                )
                if simulated:
                    indexes = [str(i) for i in range(self.simulated_gpus)]
                for gpu in indexes:
                    gpus.add_metric([job.jobid, node, gpu, "true" if simulated else "false"], 1)
        by_state = GaugeMetricFamily("slurm_jobs", "jobs Slurm knows, by state", labels=["state"])
        for state, count in sorted(counts.items()):
            by_state.add_metric([state], count)
        yield from (info, held, gpus, cpus, by_state)

    @staticmethod
    def _nodes(nodes: list[Node]) -> Iterator[Metric]:
        state = GaugeMetricFamily("slurm_node_state", "the node's Slurm state (1)", labels=["node", "state"])
        gpus = GaugeMetricFamily("slurm_node_gpus", "GPUs Slurm knows on the node (GRES)", labels=["node"])
        for node in nodes:
            state.add_metric([node.name, node.state], 1)
            gpus.add_metric([node.name], node.gpus)
        yield from (state, gpus)


# ---- the jobs' processes on this node ------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # start time in clock ticks since boot: a reused pid is a new process
    jobid: str
    cpu_seconds: float


def read_procs(proc: Path = Path("/proc")) -> list[Proc]:
    """Every process with a SLURM_JOB_ID in its environment, with its CPU time (utime + stime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: list[Proc] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:  # gone, or not ours to read
            continue
        match = re.search(rb"(?:^|\0)SLURM_JOB_ID=(\d+)", environ)
        if not match:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
        utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])
        out.append(Proc(int(entry.name), start, match.group(1).decode(), (utime + stime) / ticks))
    return out


@dataclass
class JobCpu:
    """Per-job CPU seconds that only grow: each process's growth is added as it is seen."""

    totals: dict[str, float] = field(default_factory=dict)
    last: dict[tuple[int, int], float] = field(default_factory=dict)

    def update(self, procs: Iterable[Proc]) -> dict[str, int]:
        """Add the growth since the last call; returns the live process count per job."""
        live: dict[tuple[int, int], float] = {}
        counts: dict[str, int] = {}
        for p in procs:
            key = (p.pid, p.start)
            grown = p.cpu_seconds - self.last.get(key, 0.0)
            self.totals[p.jobid] = self.totals.get(p.jobid, 0.0) + max(grown, 0.0)
            live[key] = p.cpu_seconds
            counts[p.jobid] = counts.get(p.jobid, 0) + 1
        self.last = live
        return counts


def in_local_container() -> bool:
    """podman writes /run/.containerenv into every container it runs (containers-common's podman-run(1))."""
    return Path("/run/.containerenv").exists()


def has_nvidia_device() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia").exists()


class SimulationRefused(RuntimeError):
    pass


def refuse_simulation_here() -> None:
    if has_nvidia_device():
        raise SimulationRefused(
            "refusing --simulate-dcgm: this node has an NVIDIA device; run NVIDIA's dcgm-exporter instead"
        )
    if not in_local_container():
        raise SimulationRefused(
            "refusing --simulate-dcgm: this is not a gpufleet local (podman) node (/run/.containerenv is "
            "missing); the stand-in GPU exporter never runs on a cloud or bare-metal node"
        )


class NodeJobsCollector:
    """The jobs' processes on this node; with ``simulated_gpus``, the stand-in DCGM series."""

    def __init__(
        self,
        node: str,
        procs: Callable[[], list[Proc]] = read_procs,
        simulated_gpus: int = 0,
        cpus_per_gpu: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_dir: Path = HEARTBEAT_DIR,
    ) -> None:
        self.node = node
        self.procs = procs
        self.simulated_gpus = simulated_gpus
        self.cpus_per_gpu = cpus_per_gpu
        self.clock = clock
        self.heartbeat_dir = heartbeat_dir
        self.cpu = JobCpu()
        self._last_sample: tuple[float, dict[str, float]] | None = None

    def collect(self) -> Iterator[Metric]:
        counts = self.cpu.update(self.procs())
        cpu = CounterMetricFamily(
            "gpufleet_job_cpu_seconds",
            "CPU time of the job's processes on this node",
            labels=["jobid", "node"],
        )
        processes = GaugeMetricFamily(
            "gpufleet_job_processes", "live processes of the job on this node", labels=["jobid", "node"]
        )
        for jobid, total in sorted(self.cpu.totals.items()):
            if jobid in counts:
                cpu.add_metric([jobid, self.node], total)
                processes.add_metric([jobid, self.node], counts[jobid])
        self.cpu.totals = {j: t for j, t in self.cpu.totals.items() if j in counts}
        yield from (cpu, processes)
        yield self._heartbeats()
        if self.simulated_gpus:
            yield from self._simulated(counts)

    def _heartbeats(self) -> Metric:
        beats = GaugeMetricFamily(
            "gpufleet_job_heartbeat_timestamp_seconds",
            "mtime of /run/gpufleet/heartbeat/<jobid>, touched by the job once per step",
            labels=["jobid", "node"],
        )
        if self.heartbeat_dir.is_dir():
            for path in sorted(self.heartbeat_dir.iterdir()):
                if path.name.isdigit():
                    beats.add_metric([path.name, self.node], path.stat().st_mtime)
        return beats

    def _busy(self, counts: dict[str, int]) -> tuple[float, str]:
        """The CPU rate of the jobs on this node since the last scrape, as a 0..1 SM-active stand-in."""
        now = self.clock()
        totals = dict(self.cpu.totals)
        last, self._last_sample = self._last_sample, (now, totals)
        jobid = ",".join(sorted(counts))
        if last is None or now <= last[0]:
            return 0.0, jobid
        grown = sum(max(t - last[1].get(j, 0.0), 0.0) for j, t in totals.items())
        rate = grown / (now - last[0]) / (self.cpus_per_gpu * self.simulated_gpus)
        return min(max(rate, 0.0), 1.0), jobid

    def _simulated(self, counts: dict[str, int]) -> Iterator[Metric]:
        busy, jobid = self._busy(counts)
        labels = ["gpu", "UUID", "device", "modelName", "Hostname", "hpc_job", "simulated"]
        sm = GaugeMetricFamily(
            "DCGM_FI_PROF_SM_ACTIVE", "SIMULATED from the CPU use of the job holding the node", labels=labels
        )
        util = GaugeMetricFamily(
            "DCGM_FI_DEV_GPU_UTIL",
            "SIMULATED from the CPU use of the job holding the node (in %)",
            labels=labels,
        )
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "SIMULATED: always 0", labels=labels)
        for gpu in range(self.simulated_gpus):
            values = [
                str(gpu),
                f"SIMULATED-{self.node}-{gpu}",
                f"nvidia{gpu}",
                "simulated",
                self.node,
                jobid,
                "true",
            ]
            sm.add_metric(values, busy)
            util.add_metric(values, round(busy * 100))
            xid.add_metric(values, 0)
        yield from (sm, util, xid)


# ---- entry point ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from prometheus_client import start_http_server

    parser = argparse.ArgumentParser(prog="gpufleet-slurm-exporter", description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["slurm", "node"], required=True)
    parser.add_argument("--listen", default="0.0.0.0")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--node", default=socket.gethostname().split(".")[0])
    parser.add_argument("--simulated-gpus", type=int, default=0, help="slurm mode: GPUs a GPU-less node has")
    parser.add_argument("--simulate-dcgm", type=int, default=0, help="node mode: stand-in GPUs (local only)")
    parser.add_argument("--cpus-per-gpu", type=float, default=1.0, help="CPU rate that reads as SM-active 1")
    args = parser.parse_args(argv)
    # The default collectors stay: process_cpu_seconds_total and process_resident_memory_bytes measure
    # the exporter's own overhead (docs/monitoring.md).
    if args.mode == "slurm":
        REGISTRY.register(SlurmCollector(simulated_gpus=args.simulated_gpus))
    else:
        if args.simulate_dcgm:
            try:
                refuse_simulation_here()
            except SimulationRefused as exc:
                print(f"gpufleet-slurm-exporter: {exc}", file=sys.stderr)
                return 2
        collector = NodeJobsCollector(
            args.node, simulated_gpus=args.simulate_dcgm, cpus_per_gpu=args.cpus_per_gpu
        )
        REGISTRY.register(collector)
    start_http_server(args.port, addr=args.listen)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
