"""The Kubernetes API as gpufleet reads it: the client (``api``) and what a cluster handed over offers
(``survey``). A leaf under preflight, infra and validate; the ``kubernetes`` package loads on first use."""
