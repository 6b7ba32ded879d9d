"""Baked node images: one policy, one baker per backend, standing on ``gpufleet.infra``.

Modules, lowest first: ``result.py`` (leaf: ``BakeResult``, and ``choose_newest``, the one choice of the
image ``up`` boots, said the same way by every baker), ``local.py`` (``LocalBaker``: podman images from a
one-node builder; their record is ``gpufleet.infra.local.bake``), ``cloud.py`` (``CloudBaker``: an AMI or a
GCP image from a builder instance, driven through a cloud's ``PulumiBackend`` and its ``images``) and
``baker.py`` (the ``Baker`` protocol, each backend's baker built from the backend table, and the current
hash of a spec through it). What infra knows of an image (the content hash, what keys a cloud image, the
image records, the retention rule) is ``gpufleet.infra.images`` (a leaf).
"""
