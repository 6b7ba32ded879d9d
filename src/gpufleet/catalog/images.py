"""The image manifests: what each base image gpufleet boots ships of the GPU node stack (``images.yaml``).

One table of facts beside the instance data. Each manifest names the exact image and the CPU architecture
its facts were read for (one manifest per architecture where the vendor publishes one page per
architecture, as for the DLAMI), and per component (driver, fabric manager, NVLSM, CUDA, NCCL, DCGM, EFA,
aws-ofi-nccl, GDRCopy, the container toolkit) whether the image ships it, its version and path where the
source gives them, and the public source. A component no source settles is unknown (``shipped: null``):
never asserted either way.

``component_modes`` turns a manifest into the per-component decision the inventory carries
(``gpufleet_gpu_components``): a shipped component is verified (never installed over or downgraded), an
absent one is installed, an unknown one is ``detect``ed: the role finds out on the node (verifies what is
there, installs what is not); persistence mode that is off (or not documented) is turned on by the
nvidia_driver role (``install``), which is not a verify failure. Pure data and functions; creates
nothing, no cloud SDK.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog.model import Source
from gpufleet.catalog.os_releases import OS_RELEASES

Mode = Literal["install", "verify", "detect"]
# The CPU architectures a manifest is read for (EC2's names, as the catalog's cpu_arch); any: the same image
# (or facts) for every architecture.
Arch = Literal["x86_64", "arm64", "any"]
# The components of the GPU node stack an image may ship, in the order the manifests list them, and the key
# the decision uses for persistence mode (not a package: a setting of the driver).
Component = Literal[
    "driver",
    "fabric_manager",
    "nvlsm",
    "cuda",
    "nccl",
    "dcgm",
    "efa",
    "ofi_nccl",
    "gdrcopy",
    "container_toolkit",
    "persistence_mode",
    "doca_ofed",
    "hpcx",
    "nvidia_peermem",
    "imex",
    "lustre_client",
]
PERSISTENCE = "persistence_mode"
# The fabric side of an image that carries one (Microsoft's HPC images): optional, listed only by the
# manifests of such images; the infiniband role verifies what is listed and installs the rest.
FABRIC_COMPONENTS = ("doca_ofed", "hpcx", "nvidia_peermem", "imex", "lustre_client")
COMPONENTS = tuple(
    name for name in get_args(Component) if name != PERSISTENCE and name not in FABRIC_COMPONENTS
)
# Components whose path a role reads when it verifies them (cuda: CUDA_HOME; nccl: NCCL's home).
PATH_COMPONENTS = ("cuda", "nccl")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShippedComponent(_Model):
    """One component of one image, as its source says."""

    shipped: bool | None = Field(description="true, false, or null: no source settles it (the role detects)")
    version: str | None = None
    path: str | None = Field(default=None, pattern=r"^/\S*$", description="its home (CUDA_HOME, NCCL's)")
    lib_dir: str | None = Field(default=None, pattern=r"^/\S*$", description="where its libraries are")
    source: str | None = Field(default=None, description="an id of the file's sources table")
    evidence: Literal["listed", "inferred"] = "listed"
    note: str | None = None

    @model_validator(mode="after")
    def _sourced(self) -> ShippedComponent:
        if self.shipped and not self.source:
            raise ValueError("a shipped component names its source")
        if self.evidence == "inferred" and not self.note:
            raise ValueError("an inferred component says in its note how it was inferred")
        if self.shipped is not True and (self.version or self.path or self.lib_dir):
            raise ValueError("a component the image does not ship, or may not, has no version or path")
        if self.shipped is None and not self.note:
            raise ValueError("an unknown component says in its note what was read and why it is not settled")
        return self


class Persistence(_Model):
    enabled: bool | None = Field(description="persistence mode as the image boots; null: not documented")
    source: str | None = None
    note: str | None = None


class ImageManifest(_Model):
    name: str
    release: str = Field(description="the exact release or image version the facts were read for")
    provider: Literal["aws", "gcp", "azure", "baremetal", "local", "any"]
    arch: Arch = Field(default="any", description="the CPU architecture the facts were read for")
    os_release: str
    families: list[str] = Field(min_length=1, description="the catalog's image family keys it is booted by")
    persistence_mode: Persistence
    components: dict[str, ShippedComponent]

    @model_validator(mode="after")
    def _complete(self) -> ImageManifest:
        missing = [c for c in COMPONENTS if c not in self.components]
        extra = sorted(set(self.components) - set(COMPONENTS) - set(FABRIC_COMPONENTS))
        if missing or extra:
            raise ValueError(
                f"components must be {', '.join(COMPONENTS)}, and any of {', '.join(FABRIC_COMPONENTS)} "
                f"(missing {missing}, unknown {extra})"
            )
        if self.os_release not in OS_RELEASES:
            raise ValueError(f"os_release {self.os_release!r} is not one of {sorted(OS_RELEASES)}")
        for name in PATH_COMPONENTS:
            item = self.components[name]
            if item.shipped is True and not item.path:
                raise ValueError(f"{name} is shipped: give its path (the role verifies it there)")
        return self

    def ships(self, component: str) -> bool:
        """True only where a source says the image ships it (unknown is not shipped)."""
        return self.components[component].shipped is True


class ImageManifests(_Model):
    sources: dict[str, Source]
    images: dict[str, ImageManifest]

    @model_validator(mode="after")
    def _sources_resolve(self) -> ImageManifests:
        for key, image in self.images.items():
            named = [c.source for c in image.components.values()] + [image.persistence_mode.source]
            unknown = sorted({s for s in named if s and s not in self.sources})
            if unknown:
                raise ValueError(f"image {key}: unknown source id(s) {unknown}")
        booted = [(f, image.arch) for image in self.images.values() for f in image.families]
        doubled = sorted(
            {
                f"{family} ({arch}, {other_arch})"
                for i, (family, arch) in enumerate(booted)
                for other, other_arch in booted[i + 1 :]
                if other == family and (arch == other_arch or "any" in (arch, other_arch))
            }
        )
        if doubled:
            raise ValueError(f"families booted by two manifests for one architecture: {doubled}")
        return self

    def for_family(self, family: str, arch: str = "x86_64") -> str | None:
        """The manifest key of an image family (catalog.aws/gcp family keys) on a CPU architecture (the
        catalog's cpu_arch), or None when not listed."""
        return next(
            (
                key
                for key, image in self.images.items()
                if family in image.families and image.arch in (arch, "any")
            ),
            None,
        )


@cache
def load_image_manifests() -> ImageManifests:
    text = resources.files("gpufleet.catalog").joinpath("images.yaml").read_text(encoding="utf-8")
    return ImageManifests.model_validate(yaml.safe_load(text))


def component_modes(image: ImageManifest | None) -> dict[str, Mode]:
    """install or verify per component (and persistence mode) for a GPU node booting ``image``.

    Shipped: verify, never install over it. Absent: install. Unknown (no source settles it): detect, the
    role finds out on the node. An unknown image (None): install all. Persistence mode on: verify; off or not
    documented: install (the nvidia_driver role turns it on).
    """
    modes: dict[str, Mode] = {name: _mode(image, name) for name in COMPONENTS}
    modes[PERSISTENCE] = "verify" if image is not None and image.persistence_mode.enabled else "install"
    for name in FABRIC_COMPONENTS:  # only where the manifest lists them (Microsoft's HPC images)
        if image is not None and name in image.components:
            modes[name] = "verify" if image.ships(name) else "install"
    return modes


def _mode(image: ImageManifest | None, component: str) -> Mode:
    if image is None:
        return "install"
    shipped = image.components[component].shipped
    return "verify" if shipped is True else "detect" if shipped is None else "install"


def component_paths(image: ImageManifest | None) -> dict[str, str]:
    """Where the roles find what the image ships: cuda_home, nccl_home, nccl_lib_dir (those known)."""
    if image is None:
        return {}
    paths: dict[str, str] = {}
    for name in PATH_COMPONENTS:
        item = image.components[name]
        if item.shipped is True and item.path:
            paths[f"{name}_home"] = item.path
        if item.shipped is True and item.lib_dir:
            paths[f"{name}_lib_dir"] = item.lib_dir
    return paths


def manifest(key: str | None) -> ImageManifest | None:
    return None if key is None else load_image_manifests().images[key]


def gcp_manifest_key(image_path: str) -> str | None:
    """The manifest of a GCP image path (``projects/<p>/global/images/family/<f>`` or an image name).

    A family of the table by name; any other image of Google's accelerator project is taken as carrying
    what the listed accelerator family carries (the driver and fabric manager only), as before;
    anything else (a custom image) is unknown: None, and every component is installed.
    """
    from gpufleet.catalog.gcp import ACCELERATOR_IMAGE_PROJECT

    manifests = load_image_manifests()
    for key, image in manifests.images.items():
        if image.provider in ("gcp", "any") and any(
            image_path.endswith(f"/{family}") or f"/{family}-v" in image_path or image_path == family
            for family in image.families
        ):
            return key
    if ACCELERATOR_IMAGE_PROJECT in image_path:
        return "gcp-ubuntu-accelerator-2404-nvidia-580"
    return None
