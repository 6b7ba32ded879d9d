"""A fake Slurm login node for the validation tests: it answers the commands gpufleet sends like a real one.

``FakeSlurm.run(command, timeout)`` reads the shell command (``shlex``) and answers:

- ``sinfo -N -h -o '%N|%T|%E' --nodes=...``: one line per node (``down*`` for nodes marked down);
- ``srun ... python3 -c <script> --fabric F [--nccl-tests DIR]``: one ``GPUFLEET_HEALTH`` line per node,
  as node_health.py prints it (with a passing nccl-tests smoke run when asked for one), with the problems
  the test asked for;
- ``srun ... bash -c '. <env file>; export ...; exec "$0" "$@"' <bindir>/<collective>_perf -b B ...``:
  each node's task "sources" that node's env file (``node_env``: the settings a fabric role would have
  written, GPUFLEET_FABRIC and GPUFLEET_TRANSPORT included; a node in ``no_env_file`` has none and its
  task exits 97 as the real script does), reports it with a ``GPUFLEET_NCCL_ENV`` line, then prints
  an nccl-tests log in the exact print format of nccl-tests 2.17 (util.cu's printf formats), whose
  busbw figures come from a real fixture log (14: all_reduce, 13: all_gather), for the ranks and hosts
  of the node list, with NCCL INFO transport lines; a slow node is a slow link: its link carries at most
  ``SLOW_LINK`` of the fixture's peak busbw, and a ring is as fast as its slowest link, so a run with it
  in the node list is capped there (small, latency-bound messages stay as they were), a
  corrupting node adds #wrong, a node without its fabric drags everyone to sockets;
- ``scontrol update nodename=... state=drain reason=...``: records the drain; ``state=resume`` lifts it;
- ``scontrol create reservation ...`` / ``scontrol delete reservation=...`` (``release.py``): one reservation;
  while it is there an idle node in it reads ``maint`` and an srun onto it that does not ask for it fails as
  Slurm refuses it (as does an srun onto a drained node);
- ``id -un``: the user validation runs as.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from pathlib import Path

from gpufleet.validate.nccl_log import parse_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"
TEMPLATES = {
    "all_reduce": "14-gke-h200-dranet-allreduce-mpitrace.log",
    "all_gather": "13-gke-b200-allgather-16rank.log",
}
NETWORK_NAMES = {"efa": "AWS Libfabric", "infiniband": "IB", "roce": "IB", "ethernet": "Socket"}
# What the fabric role writes as GPUFLEET_TRANSPORT (gpufleet's canonical transport names).
CONFIGURED_TRANSPORT = {"efa": "OFI", "infiniband": "IB", "roce": "IB", "ethernet": "Socket"}


def _busbw_table(collective: str) -> list[tuple[int, float]]:
    test = parse_log(FIXTURES / TEMPLATES.get(collective, TEMPLATES["all_reduce"]))[0]
    return [(row.size, row.oop.busbw) for row in test.rows if row.oop is not None]


_TABLES = {name: _busbw_table(name) for name in TEMPLATES}


# A slow node's link, as a share of the fixture's peak busbw (a link at 40 % of its speed: a NIC on a
# narrower PCIe link, a flapping port). nccl-tests' busbw is the figure to hold against one link's peak
# (nccl-tests doc/PERFORMANCE.md, "Bus bandwidth"), and a ring moves every chunk through every link, so the
# slowest member's link bounds the whole ring.
SLOW_LINK = 0.4


def bus_factor(collective: str, ranks: int) -> float:
    if ranks <= 1:
        return 1.0
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return (ranks - 1) / ranks


def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (util.cu)."""
    power, val = 0, 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


class FakeSlurm:
    """An ``Executor`` that plays a Slurm login node. Thread-safe (the runner runs rounds in parallel)."""

    def __init__(
        self,
        nodes: list[str],
        *,
        gpus: int = 8,
        fabric: str = "infiniband",
        bad: dict[str, str] | None = None,
        health: dict[str, dict] | None = None,
        down: set[str] | None = None,
        busbw_scale: float = 1.0,
        drain_rc: int = 0,
        node_env: dict[str, dict[str, str]] | None = None,
        no_env_file: set[str] | None = None,
        drained: dict[str, str] | None = None,
        reservation_rc: int = 0,
        user: str = "root",
    ) -> None:
        self.nodes = nodes
        self.gpus = gpus
        self.fabric = fabric
        self.bad = bad or {}  # node -> "slow" | "wrong" | "socket" | "crash"
        self.health = health or {}  # node -> overrides of the health JSON
        self.down = down or set()
        self.busbw_scale = busbw_scale
        self.drain_rc = drain_rc
        self.node_env = node_env or {}  # node -> its env file's settings, over the default below
        self.no_env_file = no_env_file or set()
        self.commands: list[str] = []
        self.collective_runs: list[tuple[str, list[str], dict[str, str]]] = []
        self.drained: dict[str, str] = dict(drained or {})
        self.reservation_rc = reservation_rc
        self.user = user  # the login node's user; scontrol's updates need root (or sudo -n, passwordless)
        self.reservation: tuple[str, list[str]] | None = None  # (name, nodes)
        self.refused: list[str] = []  # sruns Slurm would not have started
        self.registering: set[str] = set()  # resumed nodes that read not responding at the next sinfo
        self._lock = threading.Lock()

    # -- the Executor protocol --

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        assert timeout > 0
        with self._lock:
            self.commands.append(command)
        argv = shlex.split(command)
        admin = self.user == "root"
        if argv[:2] == ["sudo", "-n"]:
            argv, admin = argv[2:], True
        if argv[0] == "sinfo":
            return self._sinfo(argv)
        if argv[0] == "scontrol":
            if not admin:  # proc_req.c: validate_super_user / validate_operator
                return 1, "", f"{' '.join(argv[1:3])}: Invalid user id\n"
            return self._scontrol(argv)
        if argv == ["id", "-un"]:
            return 0, f"{self.user}\n", ""
        assert argv[0] == "srun", command
        options, task = self._srun_options(argv[1:])
        nodes = options["--nodelist"].split(",")
        assert int(options["-N"]) == len(nodes), command
        refusal = self._refusal(nodes, options.get("--reservation"))
        if refusal:
            with self._lock:
                self.refused.append(command)
            return 1, "", f"srun: error: Unable to allocate resources: {refusal}\n"
        if task[0] == "python3":
            return self._health(nodes, task)
        assert task[:2] == ["bash", "-c"], f"collectives run inside bash -c: {command}"
        script, task = task[2], task[3:]
        sourced = re.search(r"\{ \. (\S+) \|\|", script)
        assert sourced, f"the task script sources no env file: {script}"
        path = sourced.group(1)
        missing = [node for node in nodes if node in self.no_env_file]
        if missing:
            lines = [f"GPUFLEET_NCCL_ENV host={node} missing {path}" for node in missing]
            lines.append("srun: error: task 0: Exited with exit code 97")
            return 97, "", "\n".join(lines) + "\n"
        env = self.env_file(nodes[0])
        env.update(dict(re.findall(r"export (\w+)=(\S+?);", script)))
        reports = "".join(
            f"GPUFLEET_NCCL_ENV host={node} fabric={self.env_file(node)['GPUFLEET_FABRIC']} "
            f"transport={self.env_file(node)['GPUFLEET_TRANSPORT']} file={path}\n"
            for node in nodes
        )
        rc, out, err = self._collective(nodes, int(options["--ntasks-per-node"]), task, env)
        return rc, out, reports + err

    def env_file(self, node: str) -> dict[str, str]:
        """The settings of ``node``'s env file as a fabric role writes them."""
        return {
            "GPUFLEET_FABRIC": self.fabric,
            "GPUFLEET_TRANSPORT": CONFIGURED_TRANSPORT[self.fabric],
            **self.node_env.get(node, {}),
        }

    # -- commands --

    def _sinfo(self, argv: list[str]) -> tuple[int, str, str]:
        nodes = next(arg for arg in argv if arg.startswith("--nodes=")).split("=", 1)[1].split(",")
        lines = []
        for node in nodes:
            if node in self.down:
                lines.append(f"{node}|down*|Not responding")
            elif node in self.drained:
                lines.append(f"{node}|drained|{self.drained[node]}")
            elif node in self.registering:  # Slurm 24.11: a resumed node registers again first
                lines.append(f"{node}|idle*|none")
                self.registering.discard(node)
            elif self.reservation is not None and node in self.reservation[1]:
                lines.append(f"{node}|maint|none")
            else:
                lines.append(f"{node}|idle|none")
        return 0, "\n".join(lines) + "\n", ""

    def _refusal(self, nodes: list[str], reservation: str | None) -> str:
        """Why Slurm would not start a step on ``nodes`` (empty: it would)."""
        if any(node in self.drained for node in nodes):
            return "Requested node configuration is not available (drained)"
        if self.reservation is not None:
            name, reserved = self.reservation
            if reservation not in (None, name):
                return "Requested reservation is invalid"
            if reservation is None and any(node in reserved for node in nodes):
                return "Required node not available (down, drained or reserved)"
        elif reservation is not None:
            return "Requested reservation is invalid"
        return ""

    def _scontrol(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[1:3] == ["create", "reservation"]:
            fields = dict(arg.split("=", 1) for arg in argv[3:])
            assert fields["flags"] == "MAINT,IGNORE_JOBS" and fields["duration"] == "UNLIMITED", argv
            if self.reservation_rc:
                return self.reservation_rc, "", "Error creating the reservation: Invalid user id\n"
            with self._lock:
                self.reservation = (fields["reservationname"], fields["nodes"].split(","))
            return 0, f"Reservation created: {fields['reservationname']}\n", ""
        if argv[1] == "delete":
            name = argv[2].split("=", 1)[1]
            if self.reservation is None or self.reservation[0] != name:
                return 1, "", "Error deleting the reservation: Requested reservation is invalid\n"
            with self._lock:
                self.reservation = None
            return 0, "", ""
        if argv[1] == "update" and argv[3] == "state=resume":
            with self._lock:
                for node in argv[2].split("=", 1)[1].split(","):
                    if self.drained.pop(node, None) is not None:
                        self.registering.add(node)
            return 0, "", ""
        assert argv[1] == "update" and argv[3] == "state=drain", argv
        nodes = argv[2].split("=", 1)[1].split(",")
        reason = argv[4].split("=", 1)[1]
        if self.drain_rc:
            return self.drain_rc, "", "scontrol: error: Invalid user for SlurmUser slurm, update denied"
        with self._lock:
            for node in nodes:
                self.drained[node] = reason
        return 0, "", ""

    @staticmethod
    def _srun_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
        options: dict[str, str] = {}
        index = 0
        while index < len(args) and args[index].startswith("-"):
            arg = args[index]
            if arg == "-N":
                options["-N"] = args[index + 1]
                index += 2
                continue
            key, _, value = arg.partition("=")
            options[key] = value
            index += 1
        return options, args[index:]

    def _health(self, nodes: list[str], task: list[str]) -> tuple[int, str, str]:
        assert task[1] == "-c" and "GPUFLEET_HEALTH" in task[2], "the health script runs with python3 -c"
        fabric = task[task.index("--fabric") + 1]
        out = []
        for node in nodes:
            data = {
                "hostname": node,
                "fqdn": f"{node}.cluster.internal",
                "gpus": {"present": self.gpus > 0, "count": self.gpus if self.gpus else None},
                "ecc": {"present": self.gpus > 0, "uncorrected": 0, "per_gpu": []},
                "xid": {"readable": True, "count": 0, "codes": [], "last": []},
                "dcgm": {"present": False},
                "fabric": {"kind": fabric, "devices": 32 if fabric == "efa" else 0, "names": []},
                "cpus": 192,
                "memory_mb": 2_000_000,
                "services": {"munge": "active", "slurmd": "active"},
            }
            if self.gpus == 0:
                data["gpus"] = {"present": False, "count": None, "note": "nvidia-smi not present"}
                data["ecc"] = {"present": False}
            if "--nccl-tests" in task:
                binary = f"{task[task.index('--nccl-tests') + 1]}/all_reduce_perf"
                data["nccl_tests"] = {"present": True, "binary": binary, "exit": 0, "passed": True}
            for key, value in self.health.get(node, {}).items():
                data[key] = value
            out.append(f"{node}: GPUFLEET_HEALTH " + json.dumps(data))
        return 0, "\n".join(out) + "\n", ""

    def _collective(
        self, nodes: list[str], tasks_per_node: int, task: list[str], env: dict[str, str]
    ) -> tuple[int, str, str]:
        binary = Path(task[0]).name
        assert binary.endswith("_perf"), task
        collective = binary[: -len("_perf")]
        flags = dict(zip(task[1::2], task[2::2], strict=False))
        with self._lock:
            self.collective_runs.append((collective, list(nodes), env))
        kinds = {self.bad[node] for node in nodes if node in self.bad}
        down = [node for node in nodes if node in self.down]
        if down:
            return (
                1,
                "",
                "srun: error: Unable to allocate resources: Requested node configuration is not available\n",
            )
        ranks = len(nodes) * tasks_per_node
        text, rc = self._log(collective, nodes, tasks_per_node, ranks, flags, kinds)
        return rc, text, "" if rc == 0 else "srun: error: task 0: Exited with exit code 1\n"

    def _log(
        self,
        collective: str,
        nodes: list[str],
        per_node: int,
        ranks: int,
        flags: dict[str, str],
        kinds: set[str],
    ) -> tuple[str, int]:
        low, high, factor = int(flags["-b"]), int(flags["-e"]), int(flags["-f"])
        table = _TABLES.get(collective, _TABLES["all_reduce"])
        lines = [
            "# nccl-tests version 2.17.6 nccl-headers=22707 nccl-library=22707",
            f"# Collective test starting: {collective}_perf",
            f"# nThread 1 nGpus 1 minBytes {low} maxBytes {high} step: {factor}(factor) warmup iters: "
            f"{flags['-w']} iters: {flags['-n']} agg iters: 1 validation: {flags['-c']} graph: 0",
            "#",
            "# Using devices",
        ]
        for rank in range(ranks):
            host = nodes[rank // per_node]
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on {host:>10s} device {rank % per_node:2d} "
                f"[0000:{rank % per_node:02x}:00] NVIDIA H100 80GB HBM3"
            )
        for index, node in enumerate(nodes):
            network = "Socket" if "socket" in kinds else NETWORK_NAMES[self.fabric]
            lines.append(f"{node}:{2000 + index}:{2000 + index} [0] NCCL INFO Using network {network}")
        lines += [
            "NCCL version 2.27.7+cuda12.9",
            "#",
            "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
            "     time   algbw   busbw  #wrong ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
            "     (us)  (GB/s)  (GB/s)         ",
        ]
        scale = self.busbw_scale
        peak = max(b for _, b in table) * scale
        # The ring's bound: the slowest member's link (a slow node's is SLOW_LINK of the peak).
        cap = min((SLOW_LINK * peak for node in nodes if self.bad.get(node) == "slow"), default=float("inf"))
        if "socket" in kinds:
            scale *= 0.1
        bus = bus_factor(collective, ranks)
        errors, size, total = 0, low, []
        redop = "sum" if collective in ("all_reduce", "reduce", "reduce_scatter") else "none"
        while size <= high:
            busbw = min(next((b for s, b in reversed(table) if s <= size), table[0][1]) * scale, cap)
            algbw = busbw / bus if bus else busbw
            time_us = size / (algbw * 1e3) if algbw > 0 else 1.0
            count = (
                size // 4
                if collective in ("all_reduce", "broadcast", "reduce", "sendrecv")
                else size // 4 // ranks
            )
            wrong = 1234 if "wrong" in kinds and size >= (1 << 20) else 0
            errors += 1 if wrong else 0
            halves = ""
            for _ in range(2):
                halves += (
                    f"  {_float_str(time_us, 7)}  {_float_str(algbw, 6)}  {_float_str(busbw, 6)}  {wrong:6g}"
                )
            lines.append(f"{size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}  {-1:6d}{halves}")
            total.append(busbw)
            if "crash" in kinds and size >= (1 << 20):
                lines[-1] = (
                    lines[-1][:52]
                    + f" {nodes[0]}: Test CUDA failure common.cu:389 'unspecified launch failure'"
                )
                lines.append(f" .. {nodes[0]} pid 1000: Test failure common.cu:519")
                return "\n".join(lines) + "\n", 1
            size *= factor
        lines += [
            f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            f"# Avg bus bandwidth    : {sum(total) / max(len(total), 1):g} ",
            "#",
            f"# Collective test concluded: {collective}_perf",
            "#",
            "",
        ]
        return "\n".join(lines) + "\n", 1 if errors else 0
