"""The pypi_wheels role's download step run for real: the control host's pip, with exactly the arguments the
role renders, against a local folder of wheels that carry the file names and tags of NVIDIA's real wheels on
PyPI (offline: ``PIP_NO_INDEX`` and ``PIP_FIND_LINKS``, which pip reads like its own flags).

A single ``--platform manylinux_2_28_x86_64`` (what the role passed until 2026-11-24) finds none of them: pip
does not widen an explicit ``manylinux_2_X`` platform to older tags, and reported ``from versions: 0.0.0a0``
for every pin on a fresh machine. These tests fail that way if the download path breaks again.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import sys
import zipfile
from pathlib import Path

import pytest
from playbook_json import run_playbook
from test_pypi_wheels_filters import wheels  # the role's filter module, loaded once

# The files pip download saved from PyPI for the pins of cuda_toolkit and nccl (2026-11-24, this machine,
# `pip download --no-deps --only-binary=:all:` with no --platform): their names are their tags.
NVIDIA_WHEELS = [
    "nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "nvidia_nvvm-13.5.37-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
    "nvidia_cuda_crt-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "nvidia_cuda_runtime-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "nvidia_nccl_cu13-2.32.3-py3-none-manylinux_2_27_x86_64.whl",
]
PINS = {
    "nvidia-cuda-nvcc": "13.5.37",
    "nvidia-nvvm": "13.5.37",
    "nvidia-cuda-crt": "13.5.37",
    "nvidia-cuda-runtime": "13.5.37",
    "nvidia-cuda-cccl": "13.3.5.0.6",
    "nvidia-nccl-cu13": "2.32.3",
}
DOWNLOAD = "Download the missing wheels with the control host's pip"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, filename: str) -> Path:
    """A minimal valid wheel under ``filename`` (name, version and tags from the name; no code)."""
    project, version, python, abi, platform = filename[: -len(".whl")].split("-")
    dist_info = f"{project}-{version}.dist-info"
    files = {
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {project.replace('_', '-')}\nVersion: {version}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: false\n"
            + "".join(f"Tag: {python}-{abi}-{tag}\n" for tag in platform.split("."))
        ).encode(),
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / filename
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def test_platforms_cover_every_tag_of_nvidias_wheels_for_a_glibc_2_28_node() -> None:
    platforms = wheels.manylinux_platforms("x86_64", "2.28")
    assert platforms[0] == "manylinux_2_28_x86_64" and platforms[-1] == "manylinux1_x86_64"
    for filename in NVIDIA_WHEELS:
        tags = filename[: -len(".whl")].split("-")[-1].split(".")
        assert set(tags) & set(platforms), f"{filename}: none of {tags} in {platforms}"


def test_platforms_never_name_a_newer_glibc_or_a_tag_the_architecture_never_had() -> None:
    assert "manylinux_2_29_x86_64" not in wheels.manylinux_platforms("x86_64", "2.28")
    arm = wheels.manylinux_platforms("aarch64", "2.28")
    assert arm[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"], arm
    assert not any("manylinux2010" in tag or "manylinux1" in tag for tag in arm), arm
    with pytest.raises(ValueError, match=r"glibc 3\.1"):
        wheels.manylinux_platforms("x86_64", "3.1")


def gather(tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, dict], Path]:
    """The role's control-host step (gather.yml) with pip reading only ``index``; ``{task: result}``."""
    cache = tmp_path / "cache"
    play = [
        {
            "name": "Gather wheels",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all", "min"],
            "tasks": [
                {
                    "name": "Gather the wheels on the control host",
                    "ansible.builtin.include_role": {"name": "pypi_wheels", "tasks_from": "gather"},
                    "vars": {"pypi_wheels_packages": PINS, "pypi_wheels_cache_dir": str(cache)},
                }
            ],
        }
    ]
    inventory = {
        "all": {
            "hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
        }
    }
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    rc, results = run_playbook(tmp_path, inventory, play)
    return rc, results.get("node", {}), cache


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the stand-in wheels are NVIDIA's x86_64 files")
def test_the_role_downloads_every_pinned_nvidia_wheel_into_an_empty_cache(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    for filename in NVIDIA_WHEELS:
        make_wheel(index, filename)
    rc, results, cache = gather(tmp_path, index, monkeypatch)
    failed = {name: result.get("msg") or result.get("stderr") for name, result in results.items()
              if result.get("failed")}  # fmt: skip
    assert rc == 0, failed
    assert sorted(path.name for path in cache.glob("*.whl")) == sorted(NVIDIA_WHEELS)
    assert len(results[DOWNLOAD]["results"]) == len(PINS)

    # A second run finds them all and downloads nothing.
    rc, results, _ = gather(tmp_path, index, monkeypatch)
    assert rc == 0 and results[DOWNLOAD]["results"] == [], results[DOWNLOAD]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the stand-in wheels are NVIDIA's x86_64 files")
def test_a_wheel_pip_cannot_find_fails_the_role_naming_it(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    for filename in NVIDIA_WHEELS[:-1]:  # no NCCL wheel to be had
        make_wheel(index, filename)
    rc, results, _ = gather(tmp_path, index, monkeypatch)
    assert rc != 0
    failed = [item for item in results[DOWNLOAD]["results"] if item.get("failed")]
    assert [item["item"][1] for item in failed] == ["nvidia-nccl-cu13==2.32.3"], failed
    assert "No matching distribution" in failed[0]["stderr"], failed[0]["stderr"][-2000:]
