"""nccl.env never exports an empty setting (issue 24): `export NCCL_SOCKET_IFNAME=''` after the gIB plugin's
set_nccl_env.sh would replace the profile's value and NCCL's own interface choice with nothing.

Rendered with the role files and gpufleet's own inventory model (``fabric_env.render``), then sourced with a
stand-in for the vendor profile that sets NCCL_SOCKET_IFNAME itself, as ``test_fabric_env`` does.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from fabric_env import inventory, render


def _sourced(text: str, tmp_path: Path) -> dict[str, str]:
    """The NCCL variables a job gets from the file, the vendor profile replaced by a stand-in."""
    for line in text.splitlines():
        if line.startswith(". "):
            stand_in = tmp_path / "profile.sh"
            stand_in.write_text("export NCCL_SOCKET_IFNAME=from-profile\n")
            text = text.replace(line, f". {shlex.quote(str(stand_in))}")
    env_file = tmp_path / "nccl.env"
    env_file.write_text(text)
    done = subprocess.run(["bash", "-c", '. "$1" && env -0', "x", str(env_file)],
                          env={"PATH": os.environ["PATH"]}, capture_output=True, check=True)  # fmt: skip
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if "=" in item)
    return {key: value for key, value in pairs if key.startswith("NCCL_")}


def test_a_gib_node_without_host_nics_leaves_the_socket_interface_to_the_profile(tmp_path: Path) -> None:
    text = render(inventory("roce", "gcp", "a4-highgpu-8g", fabric_host_nics=[]))
    assert not re.search(r"^export \w+=(''|\"\")?$", text, re.MULTILINE), text
    assert _sourced(text, tmp_path) == {"NCCL_NET": "gIB", "NCCL_SOCKET_IFNAME": "from-profile"}, text


def test_a4_names_its_host_nics_as_googles_a4_script_does(tmp_path: Path) -> None:
    """The catalog's a4-highgpu-8g host NICs: Cluster Toolkit's A4 run-nccl-tests-via-ramble.sh:134."""
    text = render(inventory("roce", "gcp", "a4-highgpu-8g"))
    assert _sourced(text, tmp_path)["NCCL_SOCKET_IFNAME"] == "enp0s19,enp192s20", text


def test_an_empty_override_does_not_export_an_empty_value(tmp_path: Path) -> None:
    """The inventory's gpufleet_nccl_env giving '' for a name drops it rather than exporting ''."""
    inv = inventory("roce", "gcp", "a3-ultragpu-8g")
    text = render(inv, {"gpufleet_nccl_env": {"NCCL_SOCKET_IFNAME": "", "NCCL_DEBUG_FILE": "/tmp/x"}})
    assert "NCCL_SOCKET_IFNAME" not in text and "export NCCL_DEBUG_FILE=/tmp/x" in text, text
