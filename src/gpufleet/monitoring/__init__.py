"""Monitoring: the Prometheus rules and alerts, Grafana dashboards, and the utilization report read back
from Prometheus (``gpufleet util``, the report ``down`` writes). The Slurm/job exporter runs on the nodes:
``gpufleet.node.slurm_exporter``.

What runs where is in docs/monitoring.md; the Ansible side is ``roles/monitoring``.
"""
