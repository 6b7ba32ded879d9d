"""Validation inside the user's image: where roles/containers staged it, and the srun options that run a
task in it through pyxis.

The spec's ``software.container_image`` (a squashfs file on the control host, or a registry reference) is
staged once by roles/containers to ``<shared mount point>/gpufleet/images/<name>``: a squashfs file keeps its
file name, a registry reference becomes a file name with every run of characters outside ``A-Za-z0-9._-``
replaced by ``+`` and ``.sqsh`` added (roles/containers/vars/main.yml, ``__containers_image_name``; the two
are kept equal by tests/validate/test_container.py). Every node starts the task from that one file
(``srun --container-image=<path>``), and enroot's mounts.d (roles/containers) brings the node's
/etc/gpufleet/nccl.env and the fabric's devices and plugin into the container.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpufleet.errors import ValidationRunError

IMAGE_DIR = "gpufleet/images"
# The role's regex_replace pattern and replacement, character for character.
NAME_PATTERN = "[^A-Za-z0-9._-]+"
NAME_REPLACEMENT = "+"


def staged_name(image: str) -> str:
    """The file name roles/containers gives the staged image."""
    if image.startswith("/"):
        return image.rsplit("/", 1)[-1]
    return re.sub(NAME_PATTERN, NAME_REPLACEMENT, image) + ".sqsh"


def staged_image(software: Mapping[str, Any], filesystem: Mapping[str, Any]) -> str | None:
    """The staged image's path on the nodes, from the inventory's ``gpufleet_software`` and
    ``gpufleet_filesystem``; None when the spec names no image."""
    image = software.get("container_image")
    if not image:
        return None
    if filesystem.get("kind", "none") == "none" or not filesystem.get("mount_point"):
        raise ValidationRunError(
            f"software.container_image is {image}, but the cluster has no shared filesystem to stage it on",
            hint="give the cluster a shared filesystem (filesystem: in the spec), or remove container_image",
        )
    return f"{str(filesystem['mount_point']).rstrip('/')}/{IMAGE_DIR}/{staged_name(str(image))}"


def check_same_image(wanted: str | None, software: Mapping[str, Any]) -> None:
    """Refuse to validate in another image than the one the cluster staged: validation runs in the image the
    inventory names (written at ``up``, staged by ``configure``), so a spec naming another one would be
    silently ignored and the report would speak for an image the user did not ask about."""
    staged = software.get("container_image") or None
    if (wanted or None) == staged:
        return
    if staged is None:
        what = f"the spec names the container image {wanted}, but the cluster has none staged"
    elif wanted is None:
        what = f"the spec names no container image, but the cluster runs its jobs in {staged}"
    else:
        what = f"the spec names the container image {wanted}, but the cluster staged {staged}"
    raise ValidationRunError(
        what,
        hint="run 'gpufleet up' and 'gpufleet configure' with this spec (they write and stage the image), "
        "then validate; or validate with the spec the cluster was configured with",
    )


def srun_options(image: str | None) -> list[str]:
    """pyxis's options for a task that runs inside ``image`` (none when ``image`` is None). The image's
    own entrypoint is not run: the task is exactly the command gpufleet gives."""
    if image is None:
        return []
    return [f"--container-image={image}", "--no-container-entrypoint"]
