"""The Slurm releases gpufleet pins: the catalog's table and the slurm role's are one; the spec refuses a
version that is not an exact release, and preflight (``gpufleet check``, ``up``) one without a pinned
checksum, each naming the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.catalog.slurm import DEFAULT_SLURM, SLURM_RELEASES
from gpufleet.errors import SpecError
from gpufleet.preflight import run_checks
from gpufleet.spec import parse_spec
from gpufleet.spec.model import Software

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "slurm"


def test_the_role_pins_the_catalogs_releases() -> None:
    role = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__slurm_releases"]
    assert role == {v: {"tag": r.tag, "sha256": r.sha256} for v, r in SLURM_RELEASES.items()}


def test_the_default_is_pinned_everywhere() -> None:
    defaults = (ROLE / "defaults" / "main.yml").read_text()
    assert DEFAULT_SLURM in SLURM_RELEASES
    assert Software().slurm == DEFAULT_SLURM
    # The role takes the release from the inventory's gpufleet_software (the spec's, so this default), with no
    # fallback of its own (issue 30 step 3; its preflight refuses a run without it).
    assert "slurm_version: \"{{ (gpufleet_software | default({})).slurm | default('') }}\"" in defaults


def test_sources_in_order_github_then_debian() -> None:
    release = SLURM_RELEASES["24.11.5"]
    assert release.urls() == (
        "https://github.com/SchedMD/slurm/archive/refs/tags/slurm-24-11-5-1.tar.gz",
        "https://deb.debian.org/debian/pool/main/s/slurm-wlm/slurm-wlm_24.11.5.orig.tar.gz",
    )
    assert release.major == "24.11"


def spec_with(slurm: str) -> str:
    return yaml.safe_dump(
        {
            "name": "s1",
            "provider": "local",
            "node_groups": [
                {"name": "head", "roles": ["controller", "login"], "instance_type": "local"},
                {"name": "c", "roles": ["compute"], "instance_type": "local", "count": 2},
            ],
            "software": {"slurm": slurm},
        }
    )


@pytest.mark.parametrize(
    ("slurm", "words"),
    [
        ("distro", ("expected an exact Slurm release such as 24.11.5", "never the distribution's")),
        ("24.11", ("expected an exact Slurm release",)),
    ],
)
def test_the_spec_takes_only_an_exact_release(slurm: str, words: tuple[str, ...]) -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(spec_with(slurm))
    said = " ".join(str(raised.value).split())
    assert "software.slurm" in said, said
    for word in words:
        assert word in said, said


def pinned_findings(slurm: str) -> list[str]:
    return [
        f"{f.path}: {f.message}"
        for f in run_checks(parse_spec(spec_with(slurm)))
        if f.check == "slurm_release_pinned" and f.level.value == "error"
    ]


def test_preflight_refuses_a_release_without_a_pinned_checksum() -> None:
    assert pinned_findings("24.11.5") == []
    (said,) = pinned_findings("23.11.4")
    assert said.startswith("software.slurm: "), said
    for word in ("has none for 23.11.4", "set software.slurm to one it knows (24.11.5)", "docs/slurm.md"):
        assert word in said, said
