"""The files that run on the cluster's nodes, with the node's own Python and no gpufleet installed.

- ``node_health`` (the node check: the gpu_health role installs it as gpufleet-node-check, nvidia_driver's
  verify runs it, ``gpufleet validate`` runs it through Slurm or a pod);
- ``slurm_exporter`` (the Slurm/job exporter the monitoring role runs on the controller and compute nodes).

The roles copy them from ``gpufleet_node_files`` (the inventory gpufleet writes names ``FOLDER``); nothing
here imports the rest of gpufleet (tests/node/test_node_files.py checks it).
"""

from pathlib import Path

FOLDER = Path(__file__).parent
"""This folder, where the roles copy the node files from (``gpufleet_node_files``)."""
