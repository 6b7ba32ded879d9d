"""What a bake comes to (``BakeResult``) and the one choice of the image a cluster boots, said the same way
by every baker (``choose_newest``). A leaf of ``gpufleet.bake``: the bakers (``local.py``, ``cloud.py``)
stand on it, and ``baker.py`` builds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpufleet.infra.images import BakedRecord


@dataclass(frozen=True)
class BakeResult:
    """The baked image of a spec's roles and pins (``Baker.build``)."""

    image: BakedRecord
    built: bool  # False: an image with this hash was already there


_Image = TypeVar("_Image", bound=BakedRecord)


def choose_newest(
    digest: str,
    newest: Callable[[str], _Image | None],
    say: Callable[[str], None],
    *,
    unbaked: str,
    baked: str,
) -> _Image | None:
    """The image a cluster's nodes boot: ``newest(digest)``, the newest baked from the roles and pins now
    (``digest``), or None; said either way, with what follows for the nodes (``unbaked``, ``baked``)."""
    found = newest(digest) if digest else None
    if found is None:
        say(
            f"no baked image for the current roles and pins (hash {digest[:12]}): {unbaked} "
            "('gpufleet image build SPEC' bakes one)"
        )
    else:
        say(
            f"node image {found.ref}: baked {found.created} from the current roles and pins "
            f"(hash {digest[:12]}); {baked}"
        )
    return found
