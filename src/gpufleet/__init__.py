"""gpufleet: from a cluster spec to a validated multi-node GPU Slurm cluster, and back to nothing."""

__version__ = "0.1.0"
