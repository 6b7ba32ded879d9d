"""GCP preflight checks (NIC layout, zones, reservations, MTU, filesystem sizes). Filled in by issue 4."""
