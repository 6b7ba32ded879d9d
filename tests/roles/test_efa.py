"""The efa role run for real on this machine (connection local) against a fake node tree shaped like what
AWS's EFA installer leaves on a node: the role keeps an EFA at or above the pin and never downgrades it,
takes the install path only where EFA is older (and then stops before anything is downloaded unless the
install is allowed and the pin's checksum is known), and names the folder that really holds
aws-ofi-nccl's plugin (lib/ or the older lib/<multiarch>/) to the dynamic linker and in the env file.

The tree's shapes and their sources:
- ``opt/amazon/efa_installed_packages``: efa_installer.sh's write_package_file() writes
  "# EFA installer version: X", "# Debug packages installed: no", "# Packages installed:" and the
  packages (the role reads only the first line).
- aws-ofi-nccl >= 1.17.0 (EFA installer >= 1.44.0, e.g. 1.50.0 with aws-ofi-nccl 1.21.1 per AWS's EFA
  release notes): libnccl-net-ofi.so, libnccl-net.so, libnccl-ofi-tuner.so and libnccl-tuner-ofi.so,
  each its own library, in ``opt/amazon/ofi-nccl/lib`` (aws/aws-ofi-nccl src/Makefile.am at v1.17.0,
  contrib/debian-template/rules after commit 6eb0870).
- aws-ofi-nccl 1.16.x (EFA installer 1.43.x, e.g. 1.43.2 with 1.16.3): libnccl-net-ofi.so and the three
  other names as symlinks to it (src/Makefile.am install-exec-hook at v1.16.3), in
  ``opt/amazon/ofi-nccl/lib/<multiarch>`` with the package's own ``etc/ld.so.conf.d/100_ofinccl.conf``
  naming that folder (contrib/debian-template/rules at v1.16.3).
- ``opt/amazon/efa/bin/fi_info``: prints the RDM record of a real ``fi_info -p efa`` output with one EFA
  device (tests/validate/data/fabric/fi_info-efa-libfabric-5689.txt, ofiwg/libfabric#5689).
"""

from __future__ import annotations

import platform
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from playbook_json import ROOT, run_playbook
from playbook_json import software as written_software

REPORT = "Report whether the node's EFA software is kept or installed"
MAY_INSTALL = "Assert that this node may install EFA"
CHECKSUM = "Assert that the installer's checksum is known"
APT = "Install what the EFA installer needs"
PLUGIN_CHECK = "Assert that the aws-ofi-nccl plugin is installed"
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}[platform.machine()]
FI_INFO_SAMPLE = ROOT / "tests" / "validate" / "data" / "fabric" / "fi_info-efa-libfabric-5689.txt"
# The aws-ofi-nccl each EFA installer bundles: 1.43.2 -> 1.16.3 and 1.50.0 -> 1.21.1 (AWS's EFA release
# notes, docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-changelog.html, as docs/fabrics.md quotes them);
# 1.49.0 -> 1.20.0 ("EFA installer 1.49.0 vends libfabric 2.4.0amzn5.0 and aws-ofi-nccl 1.20.0",
# aws/deep-learning-containers docker/base/cu132/Dockerfile at commit 149d8e5, read 2026-11-24).
BUNDLED_OFI_NCCL = {"1.43.2": "1.16.3", "1.49.0": "1.20.0", "1.50.0": "1.21.1"}
PLUGIN_NAMES = ("libnccl-net.so", "libnccl-ofi-tuner.so", "libnccl-tuner-ofi.so")


def fake_node(root: Path, efa_version: str | None, plugin_layout: str | None) -> Path:
    """``root``/opt/amazon as the EFA installer leaves it: ``plugin_layout`` is "flat" (aws-ofi-nccl >=
    1.17.0), "multiarch" (1.16.x on Debian/Ubuntu) or None (no plugin)."""
    amazon = root / "opt" / "amazon"
    (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
    if efa_version is None:
        return amazon
    bin_dir = amazon / "efa" / "bin"
    bin_dir.mkdir(parents=True)
    (amazon / "efa_installed_packages").write_text(
        f"# EFA installer version: {efa_version}\n# Debug packages installed: no\n# Packages installed:\n"
        "ibverbs-providers libfabric1-aws libfabric-aws-bin libfabric-aws-dev libnccl-ofi efa-config\n"
    )
    rdm_record = "".join(FI_INFO_SAMPLE.read_text().splitlines(keepends=True)[:6])
    fi_info = bin_dir / "fi_info"
    fi_info.write_text(
        '#!/bin/sh\n[ "$*" = "-p efa -t FI_EP_RDM" ] || { echo "fake fi_info: unexpected $*" >&2; exit 1; }\n'
        f"cat <<'EOF'\n{rdm_record}EOF\n"
    )
    fi_info.chmod(fi_info.stat().st_mode | stat.S_IXUSR)
    lib = amazon / "ofi-nccl" / "lib"
    if plugin_layout == "flat":
        lib.mkdir(parents=True)
        for name in ("libnccl-net-ofi.so", *PLUGIN_NAMES):
            (lib / name).write_bytes(b"\x7fELF stand-in for " + name.encode())
    elif plugin_layout == "multiarch":
        folder = lib / MULTIARCH
        folder.mkdir(parents=True)
        (folder / "libnccl-net-ofi.so").write_bytes(b"\x7fELF stand-in for libnccl-net-ofi.so")
        for name in PLUGIN_NAMES:
            (folder / name).symlink_to("libnccl-net-ofi.so")
        package_conf = root / "etc" / "ld.so.conf.d" / "100_ofinccl.conf"
        package_conf.write_text(f"/opt/amazon/ofi-nccl/lib/{MULTIARCH}/\n")
    return amazon


def converge(
    tmp_path: Path, amazon: Path, pin: str, software: dict[str, str] | None = None, **extra: object
) -> tuple[int, dict[str, dict]]:
    """Gather min facts as site.yml does, then run the efa role on this machine as a one-EFA node. The
    inventory's software pins: the installer and, where known, the aws-ofi-nccl that installer bundles."""
    if software is None:
        software = {"efa_installer": pin}
        if pin in BUNDLED_OFI_NCCL:
            software["aws_ofi_nccl"] = BUNDLED_OFI_NCCL[pin]
    node = amazon.parent.parent
    play = [{"name": "Fabric", "hosts": "all", "gather_facts": True, "gather_subset": ["!all", "min"],
             "roles": [{"role": "efa"}]}]  # fmt: skip
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_fabric": "efa",
        "gpufleet_instance_type": "g5.8xlarge",
        "gpufleet_fabric_interfaces": 1,
        "gpufleet_fabric_gpudirect_rdma": False,
        "gpufleet_software": written_software(**software),  # the rest as the inventory writes it
        "gpufleet_nccl_env_file": str(tmp_path / "nccl.env"),
        "efa_prefix": str(amazon),
        "efa_ld_so_conf": str(node / "etc" / "ld.so.conf.d" / "gpufleet-ofi-nccl.conf"),
        "efa_work_dir": str(tmp_path / "work"),
        "efa_disable_ptrace_protection": False,  # this machine's kernel settings stay as they are
        **extra,
    }
    rc, results = run_playbook(tmp_path, {"all": {"hosts": {"node": host}}}, play)
    return rc, results.get("node", {})


def sourced(env_file: Path, *names: str) -> dict[str, str]:
    """What a job sees after sourcing the env file (starting from an empty LD_LIBRARY_PATH)."""
    script = '. "$1"; shift; for n in "$@"; do printf "%s=%s\\n" "$n" "${!n-<unset>}"; done'
    done = subprocess.run(
        ["bash", "-c", script, "x", str(env_file), *names],
        env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def failures(results: dict[str, dict]) -> dict[str, str]:
    return {name: str(result.get("msg")) for name, result in results.items() if result.get("failed")}


def test_a_dlami_newer_than_the_pin_is_kept_and_its_plugin_folder_named(tmp_path: Path):
    """A DLAMI of 2026-09/10 carries EFA 1.50.0 (aws-ofi-nccl 1.21.1 in lib/); the pin 1.43.3 (no
    recorded checksum) is a minimum, so nothing is installed or downgraded and no checksum is needed."""
    amazon = fake_node(tmp_path / "node", "1.50.0", "flat")
    rc, results = converge(tmp_path, amazon, "1.43.3")
    assert rc == 0, failures(results)
    report = results[REPORT]["msg"]
    assert report == "EFA installer 1.50.0 is on node, at or above the pin 1.43.3: kept, nothing installed."
    for task in (MAY_INSTALL, CHECKSUM, APT):
        assert results[task].get("skipped"), (task, results[task])
    assert not (tmp_path / "work").exists()
    linker = (tmp_path / "node" / "etc" / "ld.so.conf.d" / "gpufleet-ofi-nccl.conf").read_text()
    assert linker == f"{amazon}/ofi-nccl/lib\n"
    names = ("LD_LIBRARY_PATH", "NCCL_NET_PLUGIN", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")
    seen = sourced(tmp_path / "nccl.env", *names)
    assert seen == {
        "LD_LIBRARY_PATH": f"{amazon}/ofi-nccl/lib",
        "NCCL_NET_PLUGIN": "ofi",
        "FI_PROVIDER": "<unset>",  # obsolete since aws-ofi-nccl 1.5.0 (doc/efa-env-var.md)
        "FI_EFA_USE_DEVICE_RDMA": "<unset>",  # not needed with libfabric >= 1.18 and aws-ofi-nccl >= 1.7
    }, seen


def test_the_multiarch_plugin_folder_is_found_named_to_the_linker_and_in_the_env(tmp_path: Path):
    """EFA installer 1.43.2 ships aws-ofi-nccl 1.16.3, whose Debian package puts the plugin in
    lib/<multiarch>/: that folder, not lib/, is what the linker and the env file must name."""
    amazon = fake_node(tmp_path / "node", "1.43.2", "multiarch")
    rc, results = converge(tmp_path, amazon, "1.43.2")
    assert rc == 0, failures(results)
    assert "kept, nothing installed" in results[REPORT]["msg"]
    folder = f"{amazon}/ofi-nccl/lib/{MULTIARCH}"
    linker = (tmp_path / "node" / "etc" / "ld.so.conf.d" / "gpufleet-ofi-nccl.conf").read_text()
    assert linker == folder + "\n"
    assert sourced(tmp_path / "nccl.env", "LD_LIBRARY_PATH")["LD_LIBRARY_PATH"] == folder
    assert not results[PLUGIN_CHECK].get("failed")


def test_a_node_without_the_plugin_fails_naming_both_folders(tmp_path: Path):
    amazon = fake_node(tmp_path / "node", "1.50.0", None)
    rc, results = converge(tmp_path, amazon, "1.49.0")
    assert rc != 0
    message = results[PLUGIN_CHECK]["msg"]
    assert f"{amazon}/ofi-nccl/lib, {amazon}/ofi-nccl/lib/{MULTIARCH} on node" in message, message


@pytest.mark.parametrize(
    ("installed", "pin", "allowed", "stops_at", "expected"),
    [
        # An older EFA with a pin whose checksum is recorded: the install path, refused when not allowed.
        ("1.38.1", "1.49.0", False, MAY_INSTALL, "has EFA installer 1.38.1 ("),
        # No EFA at all, allowed, but the pin has no recorded checksum: nothing unchecked is installed.
        (None, "1.43.3", True, CHECKSUM, "no SHA-256 is recorded for EFA installer 1.43.3"),
    ],
    ids=["older-not-allowed", "absent-pin-without-checksum"],
)
def test_an_older_or_absent_efa_takes_the_install_path_and_stops_before_downloading(
    tmp_path: Path, installed: str | None, pin: str, allowed: bool, stops_at: str, expected: str
):
    amazon = fake_node(tmp_path / "node", installed, "multiarch" if installed else None)
    rc, results = converge(tmp_path, amazon, pin, efa_install_allowed=allowed)
    assert rc != 0
    report = results[REPORT]["msg"]
    present = f"EFA installer {installed}" if installed else "no EFA software"
    assert report.startswith(f"node has {present}, below the pin {pin}: install EFA installer {pin}"), report
    message = results[stops_at]["msg"]
    assert results[stops_at]["failed"] and expected in message, message
    if stops_at == CHECKSUM:
        assert "set efa_installer_sha256" in message and "1.49.0, 1.50.0" in message, message
    assert APT not in results and not (tmp_path / "work").exists()


def test_the_expected_plugin_defaults_to_what_the_pinned_installer_bundles(tmp_path: Path):
    """The spec's default aws_ofi_nccl and the role's fallback both name the plugin the default EFA pin
    bundles (1.49.0 -> 1.20.0), so the env file's GPUFLEET_OFI_NCCL_EXPECTED says what the node runs."""
    from gpufleet.spec.model import Software

    pin = Software().efa_installer
    assert Software().aws_ofi_nccl == BUNDLED_OFI_NCCL[pin]
    amazon = fake_node(tmp_path / "node", pin, "flat")
    rc, results = converge(tmp_path, amazon, pin, software={"efa_installer": pin})
    assert rc == 0, failures(results)
    seen = sourced(tmp_path / "nccl.env", "GPUFLEET_OFI_NCCL_EXPECTED")
    assert seen == {"GPUFLEET_OFI_NCCL_EXPECTED": BUNDLED_OFI_NCCL[pin]}
