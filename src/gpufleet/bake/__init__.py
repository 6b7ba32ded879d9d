"""Baked node images: one policy, one baker per backend.

Modules, lowest first: ``key.py`` (leaf: what keys a cloud image, which group is baked, when a cluster
cannot share one image, the one choice of the image ``up`` boots), ``baker.py`` (the ``Baker`` protocol
each backend's ``baker`` follows, and the current hash of a spec through it), ``local.py`` (podman images,
``gpufleet.infra.local.bake`` and ``builder``) and ``cloud.py`` (an AMI or a GCP image from a builder
instance, driven through a cloud's ``PulumiBackend``). The content hash and the image record are
``gpufleet.infra.images`` (leaf).
"""
