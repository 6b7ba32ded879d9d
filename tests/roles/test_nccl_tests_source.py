"""nccl-tests builds on a real cluster with the role's defaults (issue 31, N3): no environment variable and no
extra variable names the source; the role takes the vendored release tarball (tests/vendor) with its pinned
sha256, as the containers role does for enroot and pyxis. Run by Ansible on this machine (connection local):
the role's preflight and its source step, the one that fails first on a cluster nothing configured."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import yaml
from playbook_json import ROOT, run_playbook, software

SITE_VENDOR = ROOT / "tests" / "vendor"


def _play(tmp_path: Path, **host_vars: object) -> tuple[int, dict[str, dict[str, dict]]]:
    cuda_env = tmp_path / "cuda.env"
    nccl_env = tmp_path / "nccl-home.env"
    cuda_env.write_text("CUDA_HOME=/usr/local/cuda\nCUDA_VERSION=12.9\n")
    nccl_env.write_text("NCCL_HOME=/usr\nNCCL_VERSION=2.27.7\n")
    inventory = {
        "all": {
            "hosts": {
                "node": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable,
                    "gpufleet_gpu_arch": "sm_90",
                    "gpufleet_gpu_stack": "install",
                    "nccl_tests_cuda_env_file": str(cuda_env),
                    "nccl_tests_nccl_env_file": str(nccl_env),
                    "nccl_tests_download_dir": str(tmp_path / "downloads"),
                    "gpufleet_software": software(),
                    **host_vars,
                }
            }
        }
    }
    play = [
        {
            "name": "The nccl_tests role's preflight and source, with its defaults",
            "hosts": "all",
            "gather_facts": True,
            "gather_subset": ["!all", "min"],
            "tasks": [
                {
                    "name": "Preflight",
                    "ansible.builtin.include_role": {"name": "nccl_tests", "tasks_from": "preflight.yml"},
                },
                {
                    "name": "Source",
                    "ansible.builtin.include_role": {
                        "name": "nccl_tests",
                        "tasks_from": "source.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Show the source",
                    "ansible.builtin.debug": {
                        "msg": {
                            "tarball": "{{ __nccl_tests_local.stat.path }}",
                            "sha256": "{{ __nccl_tests_local.stat.checksum }}",
                        }
                    },
                },
            ],
        }
    ]
    return run_playbook(tmp_path, inventory, play)


def test_the_defaults_build_from_the_vendored_tarball_with_its_pinned_checksum(tmp_path, monkeypatch):
    for name in ("GPUFLEET_NCCL_TESTS_TARBALL", "GPUFLEET_NCCL_TESTS_SHA256", "GPUFLEET_VENDOR_DIR"):
        monkeypatch.delenv(name, raising=False)
    rc, results = _play(tmp_path)
    assert rc == 0, {task: r.get("msg") for task, r in results.get("node", {}).items() if r.get("failed")}
    shown = results["node"]["Show the source"]["msg"]
    tarball = Path(shown["tarball"])
    assert tarball.resolve() == (SITE_VENDOR / "nccl-tests-2.19.6.tar.gz").resolve(), shown
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == shown["sha256"], shown
    # The vendored file's checksum is the one SOURCES.md records beside it.
    assert shown["sha256"] in (SITE_VENDOR / "SOURCES.md").read_text()


def test_a_version_without_a_vendored_tarball_asks_for_a_checksum_in_the_install_phase(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUFLEET_NCCL_TESTS_SHA256", raising=False)
    monkeypatch.delenv("GPUFLEET_NCCL_TESTS_TARBALL", raising=False)
    rc, results = _play(tmp_path, gpufleet_software=software(nccl_tests="2.19.5"))
    assert rc != 0
    failed = {task: r.get("msg", "") for task, r in results["node"].items() if r.get("failed")}
    message = " ".join(str(m) for m in failed.values())
    assert "nccl_tests_sha256" in message and "v2.19.5.tar.gz" in message, failed


def test_no_test_sets_the_old_environment_variables():
    """The variables are gone from the role; no test may need them (issue 31, N3)."""
    users = [
        path.relative_to(ROOT)
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != Path(__file__).name and "GPUFLEET_NCCL_TESTS_" in path.read_text(encoding="utf-8")
    ]
    defaults = yaml.safe_load((ROOT / "roles" / "nccl_tests" / "defaults" / "main.yml").read_text())
    assert users == [], users
    assert not any("GPUFLEET_NCCL_TESTS_" in str(value) for value in defaults.values()), defaults
