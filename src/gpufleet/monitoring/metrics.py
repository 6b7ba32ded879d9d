"""The names every part of monitoring shares: the exporters' series, the recording rules' outputs, and the
DCGM fields gpufleet asks dcgm-exporter for (with their source).

The DCGM field names and their meaning are NVIDIA's: dcgm-exporter's ``etc/dcp-metrics-included.csv`` and
``etc/default-counters.csv`` (github.com/NVIDIA/dcgm-exporter, read 2026-11-24). The violation counters'
unit differs between the two files (``in us`` in default-counters.csv at b54068a, ``in ns`` in
dcp-metrics-included.csv at 084a245); DCGM's own field reference (dcgm_fields.h, DCGM_FI_DEV_POWER_VIOLATION:
"Power Violation time in usec") says microseconds, which is what gpufleet uses (VIOLATION_SECONDS_PER_UNIT).
"""

from __future__ import annotations

from typing import Final, NamedTuple


class DcgmField(NamedTuple):
    name: str
    kind: str  # gauge or counter, as dcgm-exporter's CSV spells it
    help: str


# The counter set gpufleet's dcgm-exporter runs with (roles/monitoring writes it as the exporter's CSV).
# SM-active is the busy measure: DCGM_FI_DEV_GPU_UTIL reads 100% on a kernel that spins (a hung NCCL
# collective), SM-active says how many SMs have work. Upstream's default CSV leaves SM-active commented out.
DCGM_FIELDS: Final[tuple[DcgmField, ...]] = (
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    DcgmField("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM."),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."
    ),
    DcgmField(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    DcgmField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    DcgmField("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    DcgmField(
        "DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."
    ),
    DcgmField(
        "DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."
    ),
    DcgmField("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
)

VIOLATION_SECONDS_PER_UNIT: Final = 1e-6  # DCGM's violation counters count microseconds (see above)

VIOLATION_COUNTERS: Final = ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION")
SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
NVLINK_ERROR_COUNTERS: Final = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
)
# node_exporter's infiniband collector (prometheus/node_exporter collector/infiniband_linux.go, read
# 2026-11-24): port counters of InfiniBand and RoCE HCAs under /sys/class/infiniband.
FABRIC_ERROR_COUNTERS: Final = (
    "node_infiniband_port_errors_received_total",
    "node_infiniband_symbol_error_total",
    "node_infiniband_link_error_recovery_total",
    "node_infiniband_link_downed_total",
)

# The Slurm/job exporter's series (gpufleet.node.slurm_exporter writes them).
JOB_INFO: Final = "slurm_job_info"  # {jobid, name, user, state, partition} 1
JOB_NODE: Final = "slurm_job_node"  # {jobid, node} 1: the job holds the node
JOB_GPU: Final = "slurm_job_gpu"  # {jobid, node, gpu} 1: the job holds that GPU of that node
NODE_STATE: Final = "slurm_node_state"  # {node, state} 1
NODE_GPUS: Final = "slurm_node_gpus"  # {node} GPUs Slurm knows on the node
JOB_CPU_SECONDS: Final = "gpufleet_job_cpu_seconds_total"  # {jobid, node}: the job's progress, per node
JOB_PROCESSES: Final = "gpufleet_job_processes"  # {jobid, node}: the job's live processes on the node
JOB_HEARTBEAT: Final = "gpufleet_job_heartbeat_timestamp_seconds"  # {jobid, node}: the job's own heartbeat

# Scrape job names (the role's prometheus.yml and the rules agree on them).
SCRAPE_NODE: Final = "node"
SCRAPE_DCGM: Final = "dcgm"
SCRAPE_SLURM: Final = "slurm"
SCRAPE_JOBS: Final = "gpufleet-jobs"
