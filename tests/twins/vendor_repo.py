"""The stand-in vendor repository the twins are built from and the roles install from.

Served to the nodes read-only at ``/twin-mirror`` (``MIRROR``), laid out as the vendors publish:

- ``repo/``: a flat apt repository (``Packages``, a ``Release`` labelled "NVIDIA CUDA") standing in for
  NVIDIA's CUDA network repository, plus the EFA installer's own ``.deb`` files (the installer installs
  them from its tarball; here they sit in the same index);
- ``ubuntu/``: the Ubuntu archive's NVIDIA ``-server`` packages Google's accelerator image carries;
- ``cuda/repos/<ubuntu2204|ubuntu2404>/x86_64/cuda-keyring_1.1-1_all.deb``: the keyring package whose
  sources entry points apt at ``repo/`` (NVIDIA's points at its https repository);
- ``gdrcopy/CUDA 12.8/<ubuntu22_04|ubuntu24_04>/x64/*.deb``: GDRCopy's download folders and file names.

Every name, version string and path is a vendor fact from tests/twins/SOURCES.md or
tests/roles/nvidia_apt/standins.csv (the rows cited by name there); where a fact was not read, SOURCES.md
says "modelled". Several versions of each package, so every pin meets a newer candidate: the driver 580 at
580.95.05 and 580.105.08 (and 595.91.07, the DLAMI's), DCGM 4 at 1:4.4.2-1, 1:4.5.3-1, 1:4.7.0-1, NCCL at
2.27.5, 2.27.7 and 2.28.9 for CUDA 12.9, the toolkit 12.9 at 12.9.0 and 12.9.1 beside 12.8 and 13.2,
GDRCopy 2.5.1, 2.5.2 and 2.6, aws-ofi-nccl 1.16.3 (the multiarch folder) and 1.21.1 (lib/).

The programs (``nvidia-smi``, ``nvcc``, ``dcgmi``, ``fi_info``) print captured outputs (``captures/``,
tests/validate/data) or, where no capture exists, the captured format with the package's own version; the
daemons (``nvidia-persistenced``, ``nv-fabricmanager``, ``nv-hostengine``) are ``sleep`` under systemd.
"""

from __future__ import annotations

from pathlib import Path

from twins.debs import Deb, build_deb, build_repo, shared_object

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
CAPTURES = HERE / "captures"
MIRROR = "/twin-mirror"
STATE = "/run/gpufleet-twin"  # where the stand-ins keep what the kernel would know (loaded module, modes)
PROC_VERSION = f"{STATE}/nvidia-version"  # stands in for /proc/driver/nvidia/version
MULTIARCH = "x86_64-linux-gnu"
DCGM_DIAG = ROOT / "tests" / "validate" / "data" / "gpu" / "dcgmi-diag-r1-j-dcgm3-pass.json"
FI_INFO = ROOT / "tests" / "validate" / "data" / "fabric" / "fi_info-efa-libfabric-5689.txt"
SMI_L = CAPTURES / "nvidia-smi-L-a3-megagpu-8g.txt"
# /proc/driver/nvidia/version as the open kernel module prints it (tests/validate/data/gpu/
# proc-driver-nvidia-version-open-565.txt), with the module's own version in place of 565.57.01.
PROC_LINE = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  "
    "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024"
)

# The driver builds in the repository, and the exact build a twin uses where its manifest names only a
# branch (Google's image: "580") or nothing (DGX OS 7): the older 580 build of the repository.
DRIVERS = ("580.95.05", "580.105.08", "595.91.07")
BRANCH_BUILD = {"580": "580.95.05"}
DCGM = ("4.4.2", "4.5.3", "4.7.0")
CUDA = {"12.8": "12.8.1-1", "12.9": ("12.9.0-1", "12.9.1-1"), "13.2": "13.2.0-1"}
NCCL = ("2.27.5", "2.27.7", "2.28.9")
GDRCOPY = ("2.5.1", "2.5.2", "2.6")  # 2.6: the gdrcopy role's pin (issue 31, N2)
# What gdrcopy-tests installs in /usr/bin (NVIDIA/gdrcopy v2.5.1 tests/Makefile install, prefix=/usr in
# packages/debian-tests/rules), and where the twins mark the gdrdrv module loaded (stands in for
# /sys/module/gdrdrv, as PROC_VERSION does for the driver's).
GDRCOPY_PROGRAMS = ("gdrcopy_copybw", "gdrcopy_copylat", "gdrcopy_apiperf", "gdrcopy_sanity", "gdrcopy_pplat")
GDRDRV_MODULE = f"{STATE}/module-gdrdrv"
OFI_NCCL = {"1.16.3": "multiarch", "1.21.1": "flat"}
CONTAINER_TOOLKIT = ("1.17.8", "1.20.0", "1.20.1")  # 1.20.0: the container_toolkit role's pin
# Its four packages, in the order dpkg takes them (each after what it depends on).
CONTAINER_TOOLKIT_PACKAGES = (
    "libnvidia-container1",
    "libnvidia-container-tools",
    "nvidia-container-toolkit-base",
    "nvidia-container-toolkit",
)
UBUNTU = {"22.04": ("jammy", "ubuntu2204", "ubuntu22_04", "Ubuntu22_04"),
          "24.04": ("noble", "ubuntu2404", "ubuntu24_04", "Ubuntu24_04")}  # fmt: skip


def _unit(description: str, exec_start: str, wanted: bool = True) -> str:
    text = f"[Unit]\nDescription={description} (gpufleet twin stand-in)\n[Service]\nExecStart={exec_start}\n"
    return text + ("[Install]\nWantedBy=multi-user.target\n" if wanted else "")


# What debhelper's dh_makeshlibs puts in every package that ships a shared library in the linker's path:
# dpkg runs ldconfig once the transaction ends (NCCL's and GDRCopy's Debian packaging use debhelper).
LDCONFIG = "activate-noawait ldconfig"
SLEEPER = ("#!/bin/sh\nexec sleep infinity\n", 0o755)

# nvidia-persistenced: persistence mode follows the daemon's flag, as the real daemon sets it on every GPU.
PERSISTENCED = (
    "#!/bin/sh\nmode=Disabled\n"
    'for arg in "$@"; do [ "$arg" = --persistence-mode ] && mode=Enabled; done\n'
    f"mkdir -p {STATE} && echo $mode > {STATE}/persistence-mode\n"
    f"trap 'echo Disabled > {STATE}/persistence-mode; exit 0' TERM\n"
    "sleep infinity & wait\n",
    0o755,
)

# nvidia-smi: -L is the capture (8 x H100, Google's A3 Mega docs); the CSV queries answer one row per GPU
# of that capture in the --format=csv,noheader[,nounits] shape of tests/validate/data/gpu/
# nvidia-smi-query-gpu-csv-rtx2080.txt (no ECC error, no remapping failure: a healthy node), persistence
# mode from the daemon's state.
NVIDIA_SMI = (
    "#!/bin/sh\n"
    f"listing={MIRROR}/share/nvidia-smi-L.txt\n"
    "count=$(grep -c '^GPU ' $listing)\n"
    'rows() { i=0; while [ $i -lt $count ]; do "$@" $i; i=$((i+1)); done; }\n'
    'case "$1" in\n'
    "  -L|--list-gpus) cat $listing ;;\n"
    f"  --query-gpu=index,persistence_mode) m=$(cat {STATE}/persistence-mode 2>/dev/null || echo Disabled);"
    ' rows sh -c "echo \\$0, $m" ;;\n'
    '  --query-gpu=*) rows sh -c "echo \\$0, 0, 0" ;;\n'
    "  --query-remapped-rows=*)"
    " rows sh -c \"printf '00000000:%02X:00.0, No\\n' \\$((0x18 + \\$0 * 16))\" ;;\n"
    '  *) echo "twin nvidia-smi: $* not modelled" >&2; exit 2 ;;\n'
    "esac\n",
    0o755,
)


def _module_unit(version: str) -> dict[str, tuple[str, int]]:
    """The kernel loading the installed module at boot: a unit that writes PROC_LINE at every boot."""
    line = PROC_LINE.format(version=version)
    unit = _unit(
        "load the NVIDIA kernel module", f"/bin/sh -c 'mkdir -p {STATE} && echo \"{line}\" > {PROC_VERSION}'"
    )
    unit = unit.replace("[Service]\n", "[Service]\nType=oneshot\nRemainAfterExit=yes\n")
    return {
        "/lib/systemd/system/gpufleet-twin-nvidia-module.service": (unit, 0o644),
        "/etc/systemd/system/multi-user.target.wants/gpufleet-twin-nvidia-module.service": (
            "->/lib/systemd/system/gpufleet-twin-nvidia-module.service",
            0,
        ),
    }


def _driver(version: str) -> list[Deb]:
    """NVIDIA's CUDA repository, Ubuntu: the pinning package, nvidia-open and what it depends on."""
    branch = version.split(".")[0]
    ubuntu = f"{version}-0ubuntu1"
    return [
        Deb(
            f"nvidia-driver-pinning-{branch}",
            f"{version}-1",
            architecture="all",
            files={
                f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}": (
                    f"Package: nvidia-open libnvidia-compute-{branch} nvidia-dkms-{branch}-open "
                    "nvidia-fabricmanager\n"
                    f"Pin: version {branch}.*\nPin-Priority: 1000\n",
                    0o644,
                )
            },
        ),
        Deb(f"libnvidia-compute-{branch}", ubuntu, files={"/usr/bin/nvidia-smi": NVIDIA_SMI}),
        Deb(
            f"nvidia-dkms-{branch}-open",
            ubuntu,
            files={
                **_module_unit(version),
                **_persistenced(),
            },
        ),
        Deb(
            "nvidia-open",
            f"{version}-1",
            depends=f"libnvidia-compute-{branch} (= {ubuntu}), nvidia-dkms-{branch}-open (= {ubuntu})",
        ),
        Deb("nvidia-fabricmanager", f"{version}-1", files=_fabricmanager()),
    ]


def _persistenced() -> dict[str, tuple[str, int]]:
    """The daemon and its packaged unit, which starts it with --no-persistence-mode (docs/gpu-stack.md)."""
    command = "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose"
    return {
        "/usr/bin/nvidia-persistenced": PERSISTENCED,
        "/lib/systemd/system/nvidia-persistenced.service": (_unit("nvidia-persistenced", command), 0o644),
    }


def _fabricmanager() -> dict[str, tuple[str, int]]:
    return {
        "/usr/bin/nv-fabricmanager": SLEEPER,
        "/lib/systemd/system/nvidia-fabricmanager.service": (
            _unit("nvidia-fabricmanager", "/usr/bin/nv-fabricmanager"), 0o644),
    }  # fmt: skip


def _canonical_580_server() -> list[Deb]:
    """Ubuntu's archive, as Google's accelerator image carries the driver (the toolkit's hold list)."""
    version = BRANCH_BUILD["580"]
    ubuntu = f"{version}-0ubuntu0.24.04.2"
    return [
        Deb("libnvidia-compute-580-server", ubuntu, files=_module_unit(version)),
        Deb(
            "nvidia-utils-580-server",
            ubuntu,
            depends=f"libnvidia-compute-580-server (= {ubuntu})",
            files={
                "/usr/bin/nvidia-smi": NVIDIA_SMI,
                **_persistenced(),
            },
        ),
        Deb("nvidia-fabricmanager-580", ubuntu, files=_fabricmanager()),
    ]


def _cuda(minor: str, version: str) -> Deb:
    """cuda-toolkit-X-Y: /usr/local/cuda-X.Y with nvcc and the runtime; /usr/local/cuda through
    update-alternatives, the highest version winning."""
    major = minor.split(".")[0]
    home = f"/usr/local/cuda-{minor}"
    update = version.split("-")[0].split(".")[-1]
    capture = CAPTURES / ("nvcc-version-12.9.1.txt" if version == "12.9.1-1" else f"nvcc-version-{minor}.txt")
    runtime = f"libcudart.so.{minor}.{update}"
    priority = int(minor.replace(".", ""))
    return Deb(
        f"cuda-toolkit-{minor.replace('.', '-')}",
        version,
        files={
            f"{home}/bin/nvcc": (f"#!/bin/sh\ncat <<'EOF'\n{capture.read_text()}EOF\n", 0o755),
            f"{home}/lib64/{runtime}": (shared_object(f"libcudart.so.{major}"), 0o644),
            f"{home}/lib64/libcudart.so.{major}": (f"->{runtime}", 0),
        },
        postinst=f"update-alternatives --install /usr/local/cuda cuda {home} {priority}",
        prerm=f'[ "$1" = upgrade ] || update-alternatives --remove cuda {home}',
    )


def nccl_header(version: str) -> str:
    """nccl.h as NCCL's build writes it (src/nccl.h.in: NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX)."""
    major, minor, patch = version.split(".")
    return (
        "#ifndef NCCL_H_\n#define NCCL_H_\n\n"
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
        '#define NCCL_SUFFIX ""\n\n'
        f"#define NCCL_VERSION_CODE {int(major) * 10000 + int(minor) * 100 + int(patch)}\n"
        "#endif\n"
    )


def _nccl(version: str, cuda: str) -> list[Deb]:
    full = f"{version}-1+cuda{cuda}"
    lib = f"/usr/lib/{MULTIARCH}"
    return [
        Deb("libnccl2", full, triggers=LDCONFIG, files={
            f"{lib}/libnccl.so.{version}": (shared_object("libnccl.so.2"), 0o644),
            f"{lib}/libnccl.so.2": (f"->libnccl.so.{version}", 0)}),
        Deb("libnccl-dev", full, depends=f"libnccl2 (= {full})", files={
            "/usr/include/nccl.h": (nccl_header(version), 0o644),
            f"{lib}/libnccl.so": ("->libnccl.so.2", 0)}),
    ]  # fmt: skip


def _dcgm(version: str) -> list[Deb]:
    full = f"1:{version}-1"
    dcgmi = (
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  --version) echo 'dcgmi  version: {version}' ;;\n"
        f"  diag) cat <<'EOF'\n{DCGM_DIAG.read_text()}\nEOF\n ;;\n"
        '  *) echo "twin dcgmi: $* not modelled" >&2; exit 2 ;;\n'
        "esac\n",
        0o755,
    )
    engine = {
        "/usr/bin/nv-hostengine": SLEEPER,
        "/lib/systemd/system/nvidia-dcgm.service": (_unit("nvidia-dcgm", "/usr/bin/nv-hostengine"), 0o644),
    }
    return [Deb("datacenter-gpu-manager-4-core", full, files={"/usr/bin/dcgmi": dcgmi})] + [
        Deb(f"datacenter-gpu-manager-4-cuda{major}", full, depends="datacenter-gpu-manager-4-core",
            files=engine)
        for major in ("12", "13")
    ]  # fmt: skip


def _gdrdrv_files() -> dict[str, tuple[str, int]]:
    """gdrdrv-dkms's init script, which loads the module at boot: a unit named as it (dh_installinit --name
    gdrdrv) that marks the module loaded in GDRDRV_MODULE (no kernel to build or insert it into)."""
    unit = _unit("gdrdrv: load the GDRCopy kernel module", f"/bin/sh -c 'mkdir -p {GDRDRV_MODULE}'")
    unit = unit.replace("[Service]\n", "[Service]\nType=oneshot\nRemainAfterExit=yes\n")
    return {"/lib/systemd/system/gdrdrv.service": (unit, 0o644)}


def _gdrcopy(version: str) -> list[Deb]:
    full = f"{version}-1"
    return [
        # debhelper's postinst for an init script enables it and starts it (dh_installinit).
        Deb("gdrdrv-dkms", full, depends="dkms (>= 1.95)", files=_gdrdrv_files(),
            postinst="systemctl enable --now gdrdrv.service >/dev/null 2>&1 || true"),
        Deb("libgdrapi", full, triggers=LDCONFIG, files={
            f"/usr/lib/{MULTIARCH}/libgdrapi.so.{version}": (shared_object("libgdrapi.so.2"), 0o644),
            f"/usr/lib/{MULTIARCH}/libgdrapi.so.2": (f"->libgdrapi.so.{version}", 0)}),
        Deb("gdrcopy-tests", full, depends=f"libgdrapi (>= {full})",
            files={f"/usr/bin/{name}": ("#!/bin/sh\nexit 0\n", 0o755) for name in GDRCOPY_PROGRAMS}),
        Deb("gdrcopy", full,
            depends=f"gdrdrv-dkms (= {full}), libgdrapi (= {full}), gdrcopy-tests (= {full})"),
    ]  # fmt: skip


def _container_toolkit(version: str) -> list[Deb]:
    """The NVIDIA Container Toolkit's four packages, with the Depends NVIDIA's architecture overview draws
    (tests/roles/nvidia_apt/standins.csv rows 44-51): the toolkit asks for the tools (>=) and its base
    (=), the tools for libnvidia-container1 (>=); nvidia-container-cli in the tools (enroot's NVIDIA hook
    runs it)."""
    full = f"{version}-1"
    cli = (f"#!/bin/sh\necho 'cli-version: {version}'\n", 0o755)
    return [
        Deb("libnvidia-container1", full),
        Deb("libnvidia-container-tools", full, depends=f"libnvidia-container1 (>= {full})",
            files={"/usr/bin/nvidia-container-cli": cli}),
        Deb("nvidia-container-toolkit-base", full),
        Deb("nvidia-container-toolkit", full,
            depends=f"libnvidia-container-tools (>= {full}), nvidia-container-toolkit-base (= {full})"),
    ]  # fmt: skip


def _efa_packages() -> list[Deb]:
    """The EFA installer's own packages: fi_info under /opt/amazon/efa, aws-ofi-nccl under
    /opt/amazon/ofi-nccl in the folder each release uses."""
    record = "".join(FI_INFO.read_text().splitlines(keepends=True)[:6])
    fi_info = (
        '#!/bin/sh\n[ "$*" = "-p efa -t FI_EP_RDM" ] ||'
        ' { echo "twin fi_info: $* not modelled" >&2; exit 1; }\n'
        f"cat <<'EOF'\n{record}EOF\n",
        0o755,
    )
    debs = [Deb("libfabric-aws-bin", "2.6.0amzn1.0", files={"/opt/amazon/efa/bin/fi_info": fi_info})]
    for version, layout in OFI_NCCL.items():
        folder = "/opt/amazon/ofi-nccl/lib" + (f"/{MULTIARCH}" if layout == "multiarch" else "")
        plugin = shared_object("libnccl-net-ofi.so")
        files: dict[str, tuple[str | bytes, int]] = {f"{folder}/libnccl-net-ofi.so": (plugin, 0o644)}
        for name in ("libnccl-net.so", "libnccl-ofi-tuner.so", "libnccl-tuner-ofi.so"):
            files[f"{folder}/{name}"] = (
                ("->libnccl-net-ofi.so", 0) if layout == "multiarch" else (plugin, 0o644)
            )
        if layout == "multiarch":
            files["/etc/ld.so.conf.d/100_ofinccl.conf"] = (f"{folder}/\n", 0o644)
        debs.append(Deb("libnccl-ofi", f"{version}-1", files=files, triggers=LDCONFIG))
    return debs


def packages() -> list[Deb]:
    debs: list[Deb] = []
    for version in DRIVERS:
        debs += _driver(version)
    for minor, versions in CUDA.items():
        for version in (versions,) if isinstance(versions, str) else versions:
            debs.append(_cuda(minor, version))
    for version in NCCL:
        debs += _nccl(version, "12.9")
    for version in DCGM:
        debs += _dcgm(version)
    for version in GDRCOPY:
        debs += _gdrcopy(version)
    debs += _efa_packages()
    for version in CONTAINER_TOOLKIT:
        debs += _container_toolkit(version)
    # DKMS from Debian 12 (gdrdrv-dkms depends on it): a stand-in, since there is no kernel to build for.
    debs.append(Deb("dkms", "3.0.10-8+deb12u1+twin1", architecture="all"))
    return debs


def keyring(codename_dir: str) -> Deb:
    """cuda-keyring 1.1-1: NVIDIA's puts the signing key and a sources entry for its repository; the
    stand-in's entry names the file: repository."""
    return Deb(
        "cuda-keyring",
        "1.1-1",
        architecture="all",
        files={f"/etc/apt/sources.list.d/cuda-{codename_dir}-x86_64.list": (
            f"deb [trusted=yes] file:{MIRROR}/repo ./\n", 0o644)},
    )  # fmt: skip


def build_mirror(root: Path) -> None:
    """The whole mirror under ``root`` (mounted at MIRROR in each twin)."""
    # NVIDIA's Release files carry "Origin: NVIDIA" and "Label: NVIDIA CUDA" (NVIDIA/cuda-repo-management
    # repo-debian.sh, as roles/nvidia_driver/vars/main.yml cites it): the label apt pins match.
    build_repo(root / "repo", packages(), release=("NVIDIA", "NVIDIA CUDA"))
    build_repo(root / "ubuntu", _canonical_580_server(), release=("Ubuntu", "Ubuntu"))
    share = root / "share"
    share.mkdir(parents=True, exist_ok=True)
    (share / "nvidia-smi-L.txt").write_text(SMI_L.read_text())
    (share / "libnccl.so").write_bytes(
        shared_object("libnccl.so.2")
    )  # NCCL the DLAMI builds in its CUDA tree
    for _, (_, repo_dir, gdr_dir, gdr_tag) in UBUNTU.items():
        build_deb(
            keyring(repo_dir), root / "cuda" / "repos" / repo_dir / "x86_64" / "cuda-keyring_1.1-1_all.deb"
        )
        for version in GDRCOPY:
            for cuda in ("12.8", "13.0"):
                folder = root / "gdrcopy" / f"CUDA {cuda}" / gdr_dir / "x64"
                for deb in _gdrcopy(version):
                    suffix = f"+cuda{cuda}" if deb.name == "gdrcopy-tests" else ""
                    build_deb(deb, folder / f"{deb.name}_{deb.version}_amd64.{gdr_tag}{suffix}.deb")
