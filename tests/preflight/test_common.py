"""Preflight checks shared by every provider, and the registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, errors, registered_checks, run_checks
from gpufleet.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]

AWS = {
    "name": "p5",
    "provider": {"kind": "aws", "region": "us-east-2", "zone": "us-east-2b"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.2xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
    ],
    "fabric": "efa",
}


def spec_with(**changes):
    data = yaml.safe_load(yaml.safe_dump(AWS))
    for key, value in changes.items():
        if key == "compute_type":
            data["node_groups"][1]["instance_type"] = value
        elif key == "compute_count":
            data["node_groups"][1]["count"] = value
        else:
            data[key] = value
    return parse_spec(yaml.safe_dump(data))


def names(findings, level=None):
    return {f.check for f in findings if level is None or f.level is level}


def test_a_good_spec_has_no_errors() -> None:
    assert errors(run_checks(spec_with())) == []


@pytest.mark.parametrize(
    ("changes", "check", "level", "words"),
    [
        (
            {"compute_type": "p9.imaginary"},
            "instance_type_known",
            Severity.ERROR,
            "not in gpufleet's aws catalog",
        ),
        ({"compute_type": "a3-megagpu-8g"}, "instance_type_provider", Severity.ERROR, "is a gcp type"),
        ({"compute_type": "g5.xlarge"}, "fabric_matches_type", Severity.ERROR, "not available on g5.xlarge"),
        ({"fabric": "ethernet"}, "fabric_unused", Severity.WARNING, "set fabric: efa"),
        ({"fabric": {"kind": "efa", "interfaces": 64}}, "fabric_interfaces", Severity.ERROR, "has 32 fabric"),
        ({"compute_count": 1}, "multi_node", Severity.WARNING, "count: 2 or more"),
        (
            {"compute_type": "m7i.2xlarge", "fabric": "ethernet"},
            "gpus_present",
            Severity.WARNING,
            "has no GPU",
        ),
    ],
)
def test_findings(changes, check, level, words) -> None:
    findings = [f for f in run_checks(spec_with(**changes)) if f.check == check]
    assert findings, f"no {check} finding in {run_checks(spec_with(**changes))}"
    assert findings[0].level is level
    assert words in findings[0].message


def test_baseline_info_and_explicit_floor() -> None:
    spec = spec_with(compute_type="p5.48xlarge")
    catalog = load_catalog()
    has_baseline = catalog.baseline("p5.48xlarge", 2, "all_gather") is not None
    infos = [f for f in run_checks(spec) if f.check == "baseline_known" and "all_gather" in f.message]
    assert bool(infos) is (not has_baseline)
    floored = spec_with(validation={"min_busbw": {"all_reduce": 300, "all_gather": 300}})
    assert not [f for f in run_checks(floored) if f.check == "baseline_known"]


def test_min_level_filters() -> None:
    findings = run_checks(spec_with(fabric="ethernet"), min_level=Severity.ERROR)
    assert all(f.level is Severity.ERROR for f in findings)


def test_errors_sort_first() -> None:
    findings = run_checks(spec_with(compute_type="g5.xlarge", compute_count=1))
    ranks = [f.level.rank for f in findings]
    assert ranks == sorted(ranks, reverse=True)


def test_every_check_has_a_unique_name_and_providers() -> None:
    checks = registered_checks()
    assert len({c.name for c in checks}) == len(checks)
    for check in checks:
        assert check.providers <= {"local", "aws", "gcp", "azure", "baremetal", "kubernetes"}, check.name


@pytest.mark.parametrize(
    ("compute_type", "cuda", "first"),
    [
        ("p6-b300.48xlarge", "12.8", "12.9"),  # sm_103: CUDA 12.9 adds it
        ("p6-b300.48xlarge", "12.9", None),
        ("p6-b200.48xlarge", "12.6", "12.8"),  # sm_100: 12.8 builds Blackwell cubins
        ("p6-b200.48xlarge", "13.0", None),
        ("p5.48xlarge", "12.2", None),  # sm_90 is not in the table: not judged
        ("p6-b300.48xlarge", "distro", None),
    ],
)
def test_cuda_must_target_the_gpu_architecture(compute_type, cuda, first):
    spec = spec_with(compute_type=compute_type, software={"cuda": cuda})
    found = [f for f in run_checks(spec) if f.check == "cuda_targets_gpu"]
    if first is None:
        assert found == [], found
    else:
        assert [(f.level, f.path) for f in found] == [(Severity.ERROR, "software.cuda")], found
        assert f"the first CUDA that does is {first}" in found[0].message, found[0].message


def _baremetal(compute_type: str, tmp_path):
    """examples/baremetal.yaml with another compute type, its inventory copied beside it."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "inventories" / "examples" / "baremetal.yml", tmp_path / "inventory.yml")
    data = yaml.safe_load((root / "examples" / "baremetal.yaml").read_text())
    data["provider"]["inventory"] = "inventory.yml"
    data["node_groups"][1]["instance_type"] = compute_type
    return parse_spec(yaml.safe_dump(data), base_dir=tmp_path)


def test_baremetal_compute_type_typo_warns_with_the_nearest_catalog_type(tmp_path) -> None:
    """A typo of a catalog type switches the bandwidth gate off silently; say so, and name the closest."""
    spec = _baremetal("dgx-h10", tmp_path)
    warnings = [
        f.message
        for f in run_checks(spec)
        if f.check == "instance_type_known" and f.level is Severity.WARNING
    ]
    assert len(warnings) == 1, [f.message for f in run_checks(spec)]
    assert "did you mean dgx-h100?" in warnings[0], warnings[0]
    assert "bandwidth" in warnings[0], warnings[0]


def test_baremetal_known_and_generic_types_do_not_warn(tmp_path) -> None:
    spec = _baremetal("dgx-h100", tmp_path)
    assert not [f for f in run_checks(spec) if f.check == "instance_type_known"]


@pytest.mark.parametrize(
    ("image", "level", "words"),
    [
        ("/nonexistent/job.sqsh", Severity.ERROR, "/nonexistent/job.sqsh does not exist on this machine"),
        (
            "{tmp}/not-squashfs.sqsh",
            Severity.ERROR,
            "is not a squashfs image (it starts with b'PK\\x03\\x04', not squashfs's 'hsqs')",
        ),
        ("{tmp}", Severity.ERROR, "is not a file"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", Severity.ERROR, "Write it nvcr.io#nvidia/pytorch:25.01-py3"),
        ("ghcr.io/team/job@sha256:" + "a" * 64, Severity.ERROR, "Write it ghcr.io#team/job@sha256:aaaa"),
        ("nvcr.io#nvidia/pytorch", Severity.WARNING, "has no tag: enroot imports 'latest'"),
        ("{tmp}/job.sqsh", None, None),
        ("nvcr.io#nvidia/pytorch:25.01-py3", None, None),
        ("ubuntu:24.04", None, None),
    ],
)
def test_check_catches_a_bad_container_image(tmp_path, image, level, words) -> None:
    """Issue 38: a container image that did not exist passed check and up, and failed in configure after every
    node was made. The squashfs files are real: one made by its magic, one a zip file."""
    (tmp_path / "job.sqsh").write_bytes(b"hsqs" + bytes(92))
    (tmp_path / "not-squashfs.sqsh").write_bytes(b"PK\x03\x04" + bytes(20))
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["software"]["container_image"] = image.format(tmp=tmp_path)
    if image == "{tmp}":
        data["software"]["container_image"] = str(tmp_path / "folder.sqsh")
        (tmp_path / "folder.sqsh").mkdir()
    found = [f for f in run_checks(parse_spec(yaml.safe_dump(data))) if f.check == "container_image_usable"]
    if level is None:
        assert found == []
        return
    assert [(f.level, f.path) for f in found] == [(level, "software.container_image")], found
    assert words in found[0].message, found[0].message
