"""The retention rule of baked cloud images, applied by ``gpufleet reap --prune-images``.

Baked images are a cache shared by clusters, not part of one: ``down`` never deletes one, and the
expiry sweep does not count them (they carry no cluster or expiry tag). ``prune`` keeps, per base
image, the ``images.KEEP_NEWEST`` newest; an older one is deleted only when no instance runs from it
(the cloud says, at delete time again) and no cluster state on this machine records its hash
(``images.referenced_hashes``). Deleting an AMI also deletes its snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.infra import images
from gpufleet.infra.images import BakeSource


@dataclass
class PrunedImage:
    scope: str  # the region (AWS) or project (GCP)
    image: images.CloudImage
    action: str  # "deleted", "would delete", "failed: ..."
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope, **self.image.to_json(), "action": self.action, "removed": self.removed}


def prune(cloud: BakeSource, scope: str, *, dry_run: bool = False) -> list[PrunedImage]:
    """Apply the retention rule to the baked images of one region or project (``cloud``: the cloud's
    ``PulumiBackend.images``)."""
    doomed = images.to_prune(cloud.list_images(scope), referenced=images.referenced_hashes())
    items = []
    for image in doomed:
        item = PrunedImage(scope, image, "would delete" if dry_run else "")
        if not dry_run:
            try:
                item.removed = cloud.delete_image(scope, image)
                item.action = "deleted"
            except GpufleetError as exc:
                item.action = f"failed: {exc.message.splitlines()[0]}"
        items.append(item)
    return items
