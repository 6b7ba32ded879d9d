"""Validation on a Kubernetes cluster: the manifests of a run (``manifests``) and the ``Scheduler`` that
creates, reads and removes them (``scheduler``)."""
