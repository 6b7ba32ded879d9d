"""Twins: Debian 12 nodes prepared to ship what a target image's manifest says it ships.

A twin is a container of the local backend's node image. At start it is prepared from its manifest
(``src/gpufleet/catalog/images.yaml``, read through ``gpufleet.catalog.images``) and the stand-in vendor
repository (``vendor_repo``): for every component the manifest marks shipped, the twin installs the vendor's
packages at the manifest's version, lays out what the image keeps outside packages (NCCL in the DLAMI's CUDA
tree, the EFA installer's record), starts what the image runs, and says it is the manifest's Ubuntu
release (``/etc/os-release``), so the roles take their Ubuntu paths (NVIDIA's ``ubuntu2404`` folder,
GDRCopy's ``Ubuntu24_04`` files). Versions and paths come from the manifest, never from the roles' pins;
where the manifest gives no version (Google's driver build, DGX OS's driver and DCGM, the DLAMI's NCCL),
the twin's choice is in ``ASSUMED`` and in SOURCES.md.

What a twin does not model: the kernel (no module is built or loaded: the loaded version is a file a boot
unit writes, ``vendor_repo.PROC_VERSION``; ``/proc/driver/nvidia/version`` stays absent, so the node check's
driver-branch line is not exercised), reboots (a restart of the container), GPUs and their errors (the
tools print captures), RDMA devices (no ``/sys/class/infiniband``: EFA's GPUDirect check, InfiniBand and
Google's GPUDirect roles cannot run), Yama's ptrace setting (a read-only /proc/sys), the userland of
Ubuntu itself (Debian 12's apt, python and systemd under an Ubuntu os-release), and the real packages'
maintainer scripts beyond what vendor_repo writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.catalog import load_catalog
from gpufleet.catalog.images import ImageManifest, manifest
from twins import vendor_repo as repo

# The instance type whose catalog facts a twin's inventory carries. DLAMI twins: g5.48xlarge (8 GPUs, one
# EFA device, no GPUDirect RDMA), the EFA type whose device count matches the one-device fi_info capture;
# the others: an 8-GPU NVSwitch H100 type of their provider, so the fabric manager is checked.
INSTANCE_TYPES = {
    "dlami-base-oss-ubuntu-22.04": "g5.48xlarge",
    "dlami-base-oss-ubuntu-24.04": "g5.48xlarge",
    "gcp-ubuntu-accelerator-2404-nvidia-580": "a3-megagpu-8g",
    "dgx-os-7": "dgx-h100",
    "ubuntu-24.04": "dgx-h100",
}

# What a twin lays out where its manifest does not know (shipped: null): the x86_64 DLAMIs' contents are not
# read (no x86_64 release page; catalog/images.yaml), so their twins carry what the ARM64 page of the same
# release lists (modelled, SOURCES.md): the roles' detect mode then meets an image that carries them. What the
# x86_64 page does say (GDRCopy 2.6 on 24.04) wins.
CONTENTS = {
    "dlami-base-oss-ubuntu-22.04": "dlami-base-oss-ubuntu-22.04-arm64",
    "dlami-base-oss-ubuntu-24.04": "dlami-base-oss-ubuntu-24.04-arm64",
}

# What a twin had to choose where its manifest gives no version (SOURCES.md says why each).
ASSUMED = {
    ("gcp-ubuntu-accelerator-2404-nvidia-580", "driver"): repo.BRANCH_BUILD["580"],
    ("dgx-os-7", "driver"): repo.BRANCH_BUILD["580"],
    ("dgx-os-7", "dcgm"): "4.7.0",
    ("dlami-base-oss-ubuntu-22.04", "nccl"): "2.28.9",
    ("dlami-base-oss-ubuntu-24.04", "nccl"): "2.28.9",
}


# The stand-in repository's DKMS (Debian 12's, see SOURCES.md), as apt names its archive file.
DKMS = "dkms_3.0.10-8+deb12u1+twin1"


@dataclass
class Twin:
    name: str  # the container's and the inventory host's name
    image: str  # the manifest key
    override: dict[str, str] = field(
        default_factory=dict
    )  # component -> version shipped against the manifest
    expect_failure: bool = False

    @property
    def manifest(self) -> ImageManifest:
        found = manifest(self.image)
        assert found is not None
        return found

    @property
    def instance_type(self) -> str:
        return INSTANCE_TYPES[self.image]

    def _known(self, component: str) -> ImageManifest:
        """The manifest that says whether the twin ships ``component``: its own, else CONTENTS's."""
        own = self.manifest
        if own.components[component].shipped is not None or self.image not in CONTENTS:
            return own
        other = manifest(CONTENTS[self.image])
        assert other is not None
        return other

    def ships(self, component: str) -> bool:
        return self._known(component).ships(component)

    def version(self, component: str) -> str:
        """The version the twin ships: its override, the manifest's, else (a component the x86_64 DLAMI ships
        without a version read, its driver) the CONTENTS page's, else ASSUMED."""
        version = self._known(component).components[component].version
        if version is None and self.image in CONTENTS:
            contents = manifest(CONTENTS[self.image])
            assert contents is not None
            version = contents.components[component].version
        return self.override.get(component) or version or ASSUMED[(self.image, component)]

    @property
    def host_nic(self) -> str:
        """The name of the node's host NIC: the catalog's (Google names them, e.g. enp0s12 on A3 Mega, and
        NCCL_SOCKET_IFNAME names it), else eth0."""
        item = load_catalog().get(self.instance_type)
        return item.fabric.host_nic_names[0] if item and item.fabric.host_nic_names else "eth0"

    @property
    def ubuntu(self) -> str:
        return self.manifest.os_release.split("-")[1]

    @property
    def fabric(self) -> str:
        """The fabric role the twin can run: EFA on the DLAMI; the others need RDMA devices or Google's
        registries (gcp_gpudirect, infiniband) that a container does not have, so they run ethernet."""
        return "efa" if self.ships("efa") else "ethernet"

    def packages(self) -> list[str]:
        """The stand-in repository's archive files the image ships (apt-get install takes the files)."""
        shipped = self.ships
        names: list[str] = []
        if shipped("driver"):
            build = self.version("driver")
            if build.count(".") == 0:
                build = repo.BRANCH_BUILD[build]
            branch, ubuntu = build.split(".")[0], f"{build}-0ubuntu1"
            if self.manifest.provider == "gcp":  # Canonical's -server packages (the toolkit's hold list)
                server = f"{build}-0ubuntu0.24.04.2"
                names += [
                    f"nvidia-utils-{branch}-server_{server}",
                    f"libnvidia-compute-{branch}-server_{server}",
                ]
                if shipped("fabric_manager"):
                    names.append(f"nvidia-fabricmanager-{branch}_{server}")
            else:
                # A DKMS-built module comes with DKMS itself (every *-dkms package needs it to build).
                names += [f"nvidia-open_{build}-1", f"libnvidia-compute-{branch}_{ubuntu}",
                          f"nvidia-dkms-{branch}-open_{ubuntu}", DKMS]  # fmt: skip
                if shipped("fabric_manager"):
                    names.append(f"nvidia-fabricmanager_{build}-1")
        if shipped("cuda"):
            minor = self.version("cuda")
            versions = repo.CUDA[minor]
            newest = versions if isinstance(versions, str) else versions[-1]
            names.append(f"cuda-toolkit-{minor.replace('.', '-')}_{newest}")
        if shipped("dcgm"):
            dcgm = self.version("dcgm")
            major = self.version("cuda").split(".")[0] if shipped("cuda") else "13"
            names += [
                f"datacenter-gpu-manager-4-core_{dcgm}-1",
                f"datacenter-gpu-manager-4-cuda{major}_{dcgm}-1",
            ]
        if shipped("efa") and shipped("ofi_nccl"):
            names += ["libfabric-aws-bin_2.6.0amzn1.0", f"libnccl-ofi_{self.version('ofi_nccl')}-1"]
        if shipped("gdrcopy"):
            gdr = self.version("gdrcopy")
            names += [DKMS] + [
                f"{name}_{gdr}-1" for name in ("gdrdrv-dkms", "libgdrapi", "gdrcopy-tests", "gdrcopy")
            ]
        if shipped("container_toolkit"):  # all four, as the toolkit's Depends bring them on the real image
            toolkit = self.version("container_toolkit")
            names += [f"{name}_{toolkit}-1" for name in repo.CONTAINER_TOOLKIT_PACKAGES]
        return [
            f"{repo.MIRROR}/{'ubuntu' if '0ubuntu0' in name else 'repo'}/{name}_"
            f"{'all' if name.startswith('dkms_') else 'amd64'}.deb"
            for name in dict.fromkeys(names)  # once each, in order
        ]

    def prepare_script(self) -> str:
        """Shell run in the twin once it boots: the image as its vendor ships it."""
        codename = repo.UBUNTU[self.ubuntu][0]
        lines = [
            "set -eu",
            # The Ubuntu release of the image (the roles read it through Ansible's facts).
            "rm -f /etc/os-release /usr/lib/os-release /etc/debian_version",
            "cat > /etc/os-release <<'EOF'",
            f'NAME="Ubuntu"\nVERSION_ID="{self.ubuntu}"\nVERSION="{self.ubuntu} LTS"',
            "ID=ubuntu\nID_LIKE=debian",
            f"VERSION_CODENAME={codename}\nUBUNTU_CODENAME={codename}",
            f'PRETTY_NAME="Ubuntu {self.ubuntu} LTS"',
            "EOF",
        ]
        debs = self.packages()
        if debs:
            lines.append("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
                         + " ".join(debs) + " >/dev/null")  # fmt: skip
        if self.ships("nccl"):  # the DLAMI builds NCCL into its CUDA tree (include/, lib/), off ldconfig
            nccl = self._known("nccl").components["nccl"]
            version = self.version("nccl")
            lines += [
                f"mkdir -p {nccl.path}/include {nccl.lib_dir}",
                f"cat > {nccl.path}/include/nccl.h <<'EOF'\n{repo.nccl_header(version)}EOF",
                f"cp {repo.MIRROR}/share/libnccl.so {nccl.lib_dir}/libnccl.so.{version}",
                f"ln -sf libnccl.so.{version} {nccl.lib_dir}/libnccl.so.2",
            ]
        if self.ships("efa"):  # what efa_installer.sh's write_package_file() leaves
            lines += [
                "cat > /opt/amazon/efa_installed_packages <<'EOF'",
                f"# EFA installer version: {self.version('efa')}\n# Debug packages installed: no\n"
                "# Packages installed:\nlibfabric-aws-bin libnccl-ofi\nEOF",
            ]
        units = []
        if self.ships("driver"):  # the image was rebooted onto its driver before it was captured
            units += ["gpufleet-twin-nvidia-module", "nvidia-persistenced"]
        if self.ships("fabric_manager") and self.instance_type != "g5.48xlarge":
            units.append("nvidia-fabricmanager")
        if self.ships("dcgm"):
            units.append("nvidia-dcgm")
        if units:
            lines.append("systemctl enable --now " + " ".join(units) + " >/dev/null 2>&1")
        lines.append("ldconfig")
        return "\n".join(lines) + "\n"


TWINS = [
    Twin("twin-dlami-2404", "dlami-base-oss-ubuntu-24.04"),
    Twin("twin-gcp-accel-580", "gcp-ubuntu-accelerator-2404-nvidia-580"),
    Twin("twin-ubuntu-2404", "ubuntu-24.04"),
    Twin("twin-dgx-os-7", "dgx-os-7"),
    Twin("twin-dlami-2204", "dlami-base-oss-ubuntu-22.04"),
    # The negative: a DLAMI 24.04 whose /usr/local/cuda is 12.8 where the manifest says 13.2.
    Twin(
        "twin-dlami-2404-old-cuda",
        "dlami-base-oss-ubuntu-24.04",
        override={"cuda": "12.8"},
        expect_failure=True,
    ),
]
