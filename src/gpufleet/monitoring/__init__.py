"""Monitoring: the Prometheus rules and alerts, the Slurm/job exporter, Grafana dashboards, and the
utilization report read back from Prometheus (``gpufleet util``, the report ``down`` writes).

What runs where is in docs/monitoring.md; the Ansible side is ``roles/monitoring``.
"""
