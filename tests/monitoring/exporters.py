"""What the exporters of a gpufleet cluster emit, and what Prometheus stores of each scrape: the series the
real engine reads in the tests (test_utilization_engine.py through the HTTP API, test_rules.py through
promtool).

The exporters, each with the label set it really emits:
- NVIDIA's dcgm-exporter (``dcgm_exposition``), rendered as its own template renders a GPU's fields
  (NVIDIA/dcgm-exporter@b921c57eb70015d779d1e8237d609925614d7965, tag 4.4.2-4.7.1, the exporter paired with
  DCGM 4.4.2, which gpu_health installs; read 2026-11-27):
  ``internal/pkg/rendermetrics/render_metrics.go`` (gpuMetricsFormat): ``FIELD{gpu="<index>",UUID="<uuid>",
  pci_bus_id="<bus id>",device="nvidia<index>",modelName="<model>",Hostname="<host>"<labels><attributes>}
  <value>``, the labels and attributes in Go's map order (sorted by key);
  ``internal/pkg/collector/gpu_collector.go`` (toMetric): the label is ``UUID`` (``uuid`` only with
  --use-old-namespace), ``Hostname`` is the node's host name (left out only with --no-hostname), and
  ``DCGM_FI_DEV_XID_ERRORS`` carries the attributes ``err_code`` (the XID) and ``err_msg``
  (``internal/pkg/collector/xid_errors.go``); doubles print as ``%f``, integers as ``%d`` (toString).
  gpufleet's counter file (roles/monitoring/files/dcgm-counters.csv) has no ``label`` field, and its unit
  passes no --hpc-job-mapping-dir, so no other label comes with them.
- gpufleet's Slurm exporter (``slurm_exposition``): its own collector
  (``gpufleet.node.slurm_exporter.SlurmCollector``) run on ``scontrol -o show job -d`` and ``sinfo``
  output in Slurm's formats (tests/monitoring/data/slurm/README.md), exposed by prometheus_client as on
  the controller.
- node_exporter's infiniband collector (``node_exposition``): ``node_infiniband_<counter>_total{device,port}``
  (prometheus/node_exporter@a7dcc3a01545180d4f2087db70994cbc3abfed13, ``collector/infiniband_linux.go``,
  ``[]string{"device", "port"}``; read 2026-11-27).

Prometheus's side (prometheus/prometheus 2.42, read 2026-11-27):
- the targets and their labels are the monitoring role's ``prometheus.yml``, rendered by ansible-core for
  the inventory (``scrape_targets``): ``job`` and ``instance`` (the address) and each static config's
  labels;
- ``scrape/scrape.go`` ``mutateSampleLabels``: with ``honor_labels`` a target label is added only where the
  exporter did not set it; without, an exporter label that a target label also names is kept as
  ``exported_<name>`` and the target's value wins. Empty label values are dropped;
- every scrape stores ``up`` (1, or 0 when the scrape fails) with the target's labels, and a staleness
  marker for each series the target's previous scrape had and this one has not (all of them when it
  fails): docs/querying/basics.md, "Staleness";
- each target is scraped every interval at its own offset within it (``scrape/target.go``, ``offset``: a
  hash of the target); ``phase`` here, never 0, so a scrape never lies on a multiple of the interval.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from tests.monitoring.real_prometheus import Stored

from factories import make_host, make_inventory
from gpufleet.inventory.model import Host, Inventory, Role
from gpufleet.node import slurm_exporter

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"

# ---- dcgm-exporter ---------------------------------------------------------------------------------------

# internal/pkg/collector/xid_errors.go (xidErrCodeToText), the codes the tests use.
XID_TEXT = {
    0: "No Error",
    13: "Graphics Engine Exception",
    48: "Double Bit ECC Error",
    79: "GPU has fallen off the bus",
}
# DCGM's field types (dcgm_fields.h): the profiling fields and power are doubles, the rest integers.
DOUBLE_FIELDS = frozenset(
    {
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_DEV_POWER_USAGE",
    }
)
# `nvidia-smi -L` on an H100 node (tests/twins/captures/nvidia-smi-L-a3-megagpu-8g.txt).
H100 = "NVIDIA H100 80GB HBM3"


def gpu_uuid(node: str, gpu: int) -> str:
    digest = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def dcgm_exposition(hostname: str, gpus: Mapping[int, Mapping[str, float]], model: str = H100) -> str:
    """What dcgm-exporter serves for ``gpus`` ({index: {field: value}}): one HELP/TYPE block per field."""
    from gpufleet.monitoring.metrics import DCGM_FIELDS

    help_of = {f.name: (f.help, f.kind) for f in DCGM_FIELDS}
    fields = sorted({name for values in gpus.values() for name in values})
    out: list[str] = []
    for name in fields:
        helptext, kind = help_of[name]
        out += [f"# HELP {name} {helptext}", f"# TYPE {name} {kind}"]
        for index in sorted(gpus):
            if name not in gpus[index]:
                continue
            value = gpus[index][name]
            text = f"{value:f}" if name in DOUBLE_FIELDS else f"{int(value):d}"
            labels = (
                f'gpu="{index}",UUID="{gpu_uuid(hostname, index)}",'
                f'pci_bus_id="00000000:{0x18 + 16 * index:02X}:00.0",'
                f'device="nvidia{index}",modelName="{model}",Hostname="{hostname}"'
            )
            if name == "DCGM_FI_DEV_XID_ERRORS":
                labels += f',err_code="{int(value)}",err_msg="{XID_TEXT.get(int(value), "Unknown Error")}"'
            out.append(f"{name}{{{labels}}} {text}")
    return "\n".join(out) + "\n"


# ---- gpufleet's Slurm exporter --------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """Job ``jobid`` holds GPUs ``gpus`` of ``node`` from ``start`` to ``end`` (unix seconds), each at
    SM-active ``busy`` while it runs."""

    jobid: str
    node: str
    gpus: tuple[int, ...]
    start: float
    end: float
    busy: float | tuple[float, ...] = 0.0

    def busy_of(self, gpu: int) -> float:
        return self.busy if isinstance(self.busy, float | int) else self.busy[self.gpus.index(gpu)]

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


def _indexes(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)


def scontrol_line(jobid: str, held: Sequence[Allocation]) -> str:
    """One job of ``scontrol -o show job -d`` (the field order of tests/monitoring/data/slurm's capture)."""
    nodes = ",".join(a.node for a in held)
    gres = sum(len(a.gpus) for a in held)
    detail = " ".join(
        f"Nodes={a.node} CPU_IDs=0-7 Mem=1800000 GRES=gpu:h100:{len(a.gpus)}(IDX:{_indexes(a.gpus)})"
        for a in held
    )
    return (
        f"JobId={jobid} JobName=train UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A Priority=1 Nice=0 "
        f"Account=(null) QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
        f"BatchFlag=1 Reboot=0 ExitCode=0:0 Partition=gpu NodeList={nodes} BatchHost={held[0].node} "
        f"NumNodes={len(held)} NumCPUs={8 * len(held)} NumTasks={len(held)} "
        f"TRES=cpu={8 * len(held)},node={len(held)},gres/gpu={gres} JOB_GRES=gpu:h100:{gres} {detail} "
        f"MinCPUsNode=8 Features=(null) Command=/home/alice/train.sbatch WorkDir=/home/alice"
    )


def slurm_exposition(running: tuple[Allocation, ...], nodes: tuple[tuple[str, str, int], ...]) -> str:
    """What gpufleet's Slurm exporter serves while ``running`` runs, on ``nodes`` ((name, state, GPUs))."""
    jobs: dict[str, list[Allocation]] = {}
    for allocation in running:
        jobs.setdefault(allocation.jobid, []).append(allocation)
    job_text = "\n".join(scontrol_line(j, held) for j, held in jobs.items()) or "No jobs in the system"
    node_text = "\n".join(f"{name}|{state}|gpu:h100:{gpus}(S:0-1)" for name, state, gpus in nodes)

    def run(argv: list[str]) -> str:
        if argv == slurm_exporter.JOB_COMMAND:
            return job_text + "\n"
        if argv == slurm_exporter.NODE_COMMAND:
            return node_text + "\n"
        raise AssertionError(f"unexpected command {argv}")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(slurm_exporter.SlurmCollector(run=run))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


# ---- node_exporter --------------------------------------------------------------------------------------


def node_exposition(ports: Mapping[tuple[str, str], Mapping[str, float]]) -> str:
    """node_exporter's infiniband counters: {(device, port): {counter name: value}}."""
    out: list[str] = []
    names = sorted({name for counters in ports.values() for name in counters})
    for name in names:
        out += [f"# HELP {name} InfiniBand port counter", f"# TYPE {name} counter"]
        for (device, port), counters in sorted(ports.items()):
            if name in counters:
                out.append(f'{name}{{device="{device}",port="{port}"}} {counters[name]:g}')
    return "\n".join(out) + "\n"


# ---- Prometheus's scrape --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    job: str
    instance: str
    labels: tuple[tuple[str, str], ...]  # the static config's labels
    honor_labels: bool

    @property
    def node(self) -> str | None:
        return dict(self.labels).get("node")

    def stored(self, exported: Mapping[str, str]) -> dict[str, str]:
        """The labels Prometheus stores for a sample the target exported with ``exported``."""
        own = {"job": self.job, "instance": self.instance, **dict(self.labels)}
        labels = dict(exported)
        for name, value in own.items():
            if self.honor_labels:
                labels.setdefault(name, value)
                continue
            if name in labels:
                labels[f"exported_{name}"] = labels[name]
            labels[name] = value
        return {k: v for k, v in labels.items() if v != ""}

    def phase_ms(self, interval_ms: int) -> int:
        digest = int(hashlib.sha256(f"{self.job}/{self.instance}".encode()).hexdigest(), 16)
        return 1 + digest % (interval_ms - 1)


def gpu_inventory(
    nodes: int = 2,
    gpus: int = 8,
    instance_type: str = "p5.48xlarge",
    provider: str = "aws",
    **extra_vars: Any,
) -> Inventory:
    """A cluster of a controller and ``nodes`` GPU nodes n1..nN, as gpufleet writes its inventory."""

    def host(name: str, roles: list[Role], index: int, count: int) -> Host:
        kind = instance_type if count else "m7i.2xlarge"
        return make_host(
            name, roles, ip=f"10.0.0.{10 + index}", instance_type=kind, gpus=count, cpus=8, memory_mb=8000
        )

    hosts = [host("ctl", [Role.CONTROLLER, Role.LOGIN], 0, 0)]
    hosts += [host(f"n{i}", [Role.COMPUTE], i, gpus) for i in range(1, nodes + 1)]
    return make_inventory(
        hosts, provider=provider, software={"monitoring": True}, extra_vars=dict(extra_vars)
    )


_RENDERED: dict[str, dict[str, Any]] = {}


def render_prometheus_config(inventory: Inventory, folder: Path) -> dict[str, Any]:
    """The role's prometheus.yml for ``inventory``, rendered by ansible-core as on the controller (the role's
    defaults and vars, the inventory's groups and host variables); once per inventory."""
    key = inventory.model_dump_json()
    if key not in _RENDERED:
        _RENDERED[key] = _render(inventory, folder)
    return _RENDERED[key]


def _render(inventory: Inventory, folder: Path) -> dict[str, Any]:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    path = folder / "inventory.yml"
    inventory.write(path)
    loader = DataLoader()
    hosts = InventoryManager(loader=loader, sources=[str(path)])
    manager = VariableManager(loader=loader, inventory=hosts)
    manager._hostvars = HostVars(inventory=hosts, variable_manager=manager, loader=loader)
    variables = manager.get_vars(host=hosts.get_host(inventory.controller.name))
    for part in ("defaults", "vars"):
        for key, value in (
            yaml.safe_load((ROLE / part / "main.yml").read_text(encoding="utf-8")) or {}
        ).items():
            if key not in variables:  # the inventory's values win over the role's defaults
                variables[key] = trust_as_template(value) if isinstance(value, str) else value
    variables["ansible_managed"] = "Ansible managed"
    templar = Templar(loader=loader, variables=variables)
    text = templar.template(trust_as_template((ROLE / "templates" / "prometheus.yml.j2").read_text()))
    return dict(yaml.safe_load(str(text)))


def scrape_targets(config: Mapping[str, Any]) -> list[Target]:
    return [
        Target(
            job=job["job_name"],
            instance=address,
            labels=tuple(sorted((static.get("labels") or {}).items())),
            honor_labels=bool(job.get("honor_labels", False)),
        )
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for address in static["targets"]
    ]


@cache
def _parsed(text: str) -> tuple[tuple[tuple[tuple[str, str], ...], float], ...]:
    """The samples of a text exposition (format 0.0.4) as Prometheus reads them
    (``model/textparse/promparse.go``): every line that is not a comment is ``name{labels} value
    [timestamp]``, the name taken as written (prometheus_client's parser, by contrast, renames a counter's
    samples, ``X`` to ``X_total``); label values unescape ``\\``, ``\"`` and ``\n``."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line.strip())
        assert match is not None, f"not a sample line: {line!r}"
        labels = {
            name: re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
            for name, value in _LABEL.findall(match["labels"] or "")
        }
        out.append(((("__name__", match["name"]), *sorted(labels.items())), float(match["value"])))
    return tuple(out)


_SAMPLE = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?'
    r" (?P<value>\S+)(?: -?\d+)?"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


Exposer = Callable[[Target, float], str | None]  # the target's page at that time; None: the scrape fails
SeriesKey = tuple[tuple[str, str], ...]


@cache
def _scraped(target: Target, page: str) -> tuple[tuple[SeriesKey, float], ...]:
    """The series (sorted labels) and values Prometheus stores from one scrape of ``page``."""
    return tuple(
        (tuple(sorted(target.stored(dict(exported)).items())), value) for exported, value in _parsed(page)
    )


@dataclass
class Scrapes:
    """What Prometheus stores while it scrapes targets every ``interval_ms``; with ``keep``, only the series
    whose name it accepts (as a metric_relabel_configs ``keep`` would)."""

    interval_ms: int
    keep: Callable[[str], bool] | None = None
    aligned: bool = False  # every target at the multiples of the interval (no offset)
    series: dict[SeriesKey, Stored] = field(default_factory=dict)
    dropped: set[SeriesKey] = field(default_factory=set)

    def run(self, targets: Iterable[Target], expose: Exposer, start: float, end: float) -> list[Stored]:
        """Every scrape of ``targets`` from ``start`` to ``end`` (unix seconds)."""
        for target in targets:
            phase = 0 if self.aligned else target.phase_ms(self.interval_ms)
            first = math.ceil((start * 1000 - phase) / self.interval_ms)
            last = math.floor((end * 1000 - phase) / self.interval_ms)
            previous: set[SeriesKey] = set()
            up = tuple(sorted(target.stored({"__name__": "up"}).items()))
            for k in range(first, last + 1):
                t_ms = k * self.interval_ms + phase
                page = expose(target, t_ms / 1000)
                found = _scraped(target, page) if page is not None else ()
                seen = {key for key, _ in found}
                for key, value in found:
                    self._add(key, t_ms, value)
                for gone in previous - seen:
                    self._add(gone, t_ms, None)
                self._add(up, t_ms, 0.0 if page is None else 1.0)
                previous = seen
        return list(self.series.values())

    def _add(self, key: SeriesKey, t_ms: int, value: float | None) -> None:
        stored = self.series.get(key)
        if stored is None:
            if key in self.dropped:
                return
            if self.keep is not None and not self.keep(dict(key)["__name__"]):
                self.dropped.add(key)
                return
            stored = self.series[key] = Stored(dict(key))
        stored.samples.append((t_ms, value))


# ---- a GPU cluster running Slurm jobs -------------------------------------------------------------------

Fields = Callable[[str, int, float], Mapping[str, float]]  # (node, GPU, time) -> dcgm fields
Ports = Callable[[str, float], Mapping[tuple[str, str], Mapping[str, float]]]  # (node, time) -> IB counters
Processes = Callable[[str, float], Sequence[slurm_exporter.Proc]]  # (node, time) -> the jobs' processes


@dataclass
class GpuCluster:
    """``inventory``'s cluster with ``allocations``: the Slurm exporter lists them, each node's dcgm-exporter
    shows its GPUs at the SM-active of the job holding them (0 when none does), XID 0.

    What a case adds (each optional): more dcgm fields per GPU (``dcgm_fields``), node_exporter's
    infiniband counters (``infiniband``), the jobs' processes (``processes``, read by gpufleet's job
    exporter, its own ``NodeJobsCollector``) and the heartbeats they touch (``heartbeats``: jobid -> time),
    Slurm's state of a node where it is not what the allocations make it (``slurm_state``), and times a
    node answers no scrape (``unreachable``)."""

    inventory: Inventory
    allocations: list[Allocation] = field(default_factory=list)
    dcgm_fields: Fields | None = None
    infiniband: Ports | None = None
    processes: Processes | None = None
    heartbeats: Callable[[str, float], Mapping[str, float]] | None = None
    slurm_state: Callable[[str, float], str | None] | None = None
    unreachable: Callable[[str, float], bool] | None = None
    _pages: dict[tuple[object, ...], str] = field(default_factory=dict, repr=False)
    _job_exporters: dict[str, tuple[slurm_exporter.NodeJobsCollector, Path, list[slurm_exporter.Proc]]] = (
        field(default_factory=dict, repr=False)
    )

    def expose(self, target: Target, t: float) -> str | None:
        if target.node is not None and self.unreachable is not None and self.unreachable(target.node, t):
            return None
        running = tuple(a for a in self.allocations if a.holds(t))
        if target.job == "slurm":
            nodes = tuple(
                (h.name, self._slurm_state(h.name, running, t), h.gpus) for h in self.inventory.compute
            )
            return self._cached(("slurm", running, nodes), lambda: slurm_exposition(running, nodes))
        assert target.node is not None, target
        if target.job == "dcgm":
            host = next(h for h in self.inventory.compute if h.name == target.node)
            gpus = tuple(
                (i, tuple(sorted(self._gpu(host.name, i, running, t).items()))) for i in range(host.gpus)
            )
            return self._cached(
                ("dcgm", host.name, gpus), lambda: dcgm_exposition(host.name, {i: dict(v) for i, v in gpus})
            )
        if target.job == "node":
            ports = self.infiniband(target.node, t) if self.infiniband else {}
            key = tuple(sorted((port, tuple(sorted(c.items()))) for port, c in ports.items()))
            return self._cached(("node", key), lambda: node_exposition(ports))
        return self._job_page(target.node, t)

    def _cached(self, key: tuple[object, ...], page: Callable[[], str]) -> str:
        if key not in self._pages:
            self._pages[key] = page()
        return self._pages[key]

    def _slurm_state(self, node: str, running: tuple[Allocation, ...], t: float) -> str:
        own = self.slurm_state(node, t) if self.slurm_state else None
        return own or ("allocated" if any(a.node == node for a in running) else "idle")

    def _gpu(self, node: str, index: int, running: tuple[Allocation, ...], t: float) -> dict[str, float]:
        held = [a.busy_of(index) for a in running if a.node == node and index in a.gpus]
        busy = held[0] if held else 0.0
        fields = {
            "DCGM_FI_PROF_SM_ACTIVE": busy,
            "DCGM_FI_DEV_GPU_UTIL": round(busy * 100),
            "DCGM_FI_DEV_XID_ERRORS": 0.0,
        }
        return {**fields, **(self.dcgm_fields(node, index, t) if self.dcgm_fields else {})}

    def _job_page(self, node: str, t: float) -> str:
        """gpufleet's job exporter on ``node`` (one collector per node: it keeps the jobs' CPU time)."""
        if node not in self._job_exporters:
            folder = Path(tempfile.mkdtemp(prefix=f"gpufleet-heartbeat-{node}-"))
            now: list[slurm_exporter.Proc] = []
            collector = slurm_exporter.NodeJobsCollector(node, procs=lambda: list(now), heartbeat_dir=folder)
            self._job_exporters[node] = (collector, folder, now)
        collector, folder, now = self._job_exporters[node]
        now[:] = self.processes(node, t) if self.processes else ()
        for jobid, beat in (self.heartbeats(node, t) if self.heartbeats else {}).items():
            path = folder / jobid
            path.touch()
            os.utime(path, (beat, beat))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)  # type: ignore[arg-type]
        return generate_latest(registry).decode()

    def stored(
        self,
        folder: Path,
        start: float,
        end: float,
        interval: float = 15.0,
        keep: Callable[[str], bool] | None = None,
        jobs: frozenset[str] = frozenset({"node", "slurm", "dcgm"}),
        aligned: bool = False,
    ) -> list[Stored]:
        """What the cluster's Prometheus holds after scraping the targets of ``jobs`` (by default all but the
        job exporters, whose series util does not read) every ``interval`` s from ``start`` to ``end``;
        ``aligned``: every target scraped on the multiples of the interval (promtool's input series)."""
        config = render_prometheus_config(self.inventory, folder)
        targets = [t for t in scrape_targets(config) if t.job in jobs]
        return Scrapes(round(interval * 1000), keep, aligned=aligned).run(targets, self.expose, start, end)


ALL_JOBS = frozenset({"node", "slurm", "dcgm", "gpufleet-jobs"})


def promtool_input_series(stored: Sequence[Stored], interval_ms: int, count: int) -> list[dict[str, str]]:
    """``stored`` (scraped ``aligned`` from time 0) as promtool's ``input_series``: one value per interval,
    ``_`` where the series has no sample, ``stale`` for a staleness marker (promtool's expanding notation,
    docs/configuration/unit_testing_rules.md)."""
    out = []
    for series in sorted(stored, key=lambda s: sorted(s.labels.items())):
        values = ["_"] * count
        for t_ms, value in series.samples:
            index, rest = divmod(t_ms, interval_ms)
            assert rest == 0 and 0 <= index < count, (series.labels, t_ms)
            values[index] = "stale" if value is None else repr(value)
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(series.labels.items()) if k != "__name__")
        out.append({"series": f"{series.name}{{{labels}}}", "values": " ".join(values)})
    return out
