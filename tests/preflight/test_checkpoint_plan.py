"""The checkpoint plan against the shared filesystem (gpufleet.preflight.checkpoint, ``gpufleet check``).

Expected figures are worked out here by hand from the vendors' numbers: FSx for Lustre's throughput is its
storage in TiB times its MB/s per TiB (PERSISTENT_2: the spec's throughput_per_tib; SCRATCH_2: 200), Managed
Lustre's the same with its tier.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from gpufleet.catalog import load_catalog
from gpufleet.preflight import Severity, run_checks
from gpufleet.preflight.checkpoint import checkpoint_figures, checkpoint_plan
from gpufleet.spec import parse_spec
from gpufleet.spec.model import CheckpointPlan

AWS = {
    "name": "p5",
    "provider": {"kind": "aws", "region": "us-east-2", "zone": "us-east-2b"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.2xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 16},
    ],
    "fabric": "efa",
    "filesystem": {
        "kind": "fsx_lustre",
        "size_gib": 4800,
        "throughput_per_tib": 1000,
        "data_repository": {"s3_path": "s3://p5-checkpoints/run"},
    },
}
DAY = 86400.0
ROOT = Path(__file__).resolve().parents[2]


def spec_with(checkpoint: dict | None, **changes: object):
    data = yaml.safe_load(yaml.safe_dump(AWS))
    data.update(changes)
    if checkpoint is not None:
        data["checkpoint"] = checkpoint
    return parse_spec(yaml.safe_dump(data))


def findings(spec) -> list:
    return list(checkpoint_plan(spec, load_catalog()))


def test_a_7b_mixed_adam_checkpoint_on_fsx_persistent_2():
    spec = spec_with({"parameters": "7B", "interval": "4h"})
    assert spec.checkpoint is not None
    figures = checkpoint_figures(spec, spec.checkpoint)
    assert figures.bytes == 98 * 10**9  # 7e9 x (2 + 4 + 4 + 4)
    assert figures.throughput.mb_s == pytest.approx(4800 / 1024 * 1000)  # 4,687.5 MB/s
    assert figures.write_s == pytest.approx(98e9 / 4687.5e6)  # 20.9 s
    assert figures.cluster_mtbf_s == pytest.approx(264 * DAY / 16)  # 16.5 days
    assert figures.best_interval_s == pytest.approx(math.sqrt(2 * 98e9 / 4687.5e6 * 264 * DAY / 16))  # 2.1 h
    assert figures.needed_bytes == 3 * 98 * 10**9
    found = findings(spec)
    assert [f.level for f in found] == [Severity.INFO], found
    message = found[0].message
    assert "98.0 GB" in message and "20.9 s at 4,688 MB/s" in message, message
    assert "best interval, 2.1 h" in message, message
    # and `gpufleet check` reports it
    assert any(f.check == "checkpoint_plan" for f in run_checks(spec))


def test_writes_that_eat_the_interval_are_flagged_with_the_fix():
    spec = spec_with(
        {"parameters": "405B", "interval": "10m"},
        filesystem={"kind": "fsx_lustre", "size_gib": 19200, "throughput_per_tib": 125},
    )
    found = findings(spec)
    overhead = [f for f in found if f.level is Severity.WARNING and "takes" in f.message]
    # 405e9 x 14 = 5.67 TB at 18.75 TiB x 125 MB/s = 2,343.75 MB/s: 2,419 s, 403 % of 10 min
    assert len(overhead) == 1 and overhead[0].path == "checkpoint.interval", found
    assert "40.3 min" in overhead[0].message and "403%" in overhead[0].message, overhead[0].message
    assert "throughput_per_tib" in overhead[0].message


def test_an_interval_far_from_youngs_is_flagged_and_one_near_it_is_not():
    far = findings(spec_with({"parameters": "7B", "interval": "30m"}))
    flagged = [f for f in far if f.level is Severity.WARNING]
    assert len(flagged) == 1 and "far from the one that loses least" in flagged[0].message, far
    assert "2.1 h (Young's" in flagged[0].message and "at yours 1.2%" in flagged[0].message
    near = findings(spec_with({"parameters": "7B", "interval": "2h"}))
    assert [f.level for f in near] == [Severity.INFO], near


def test_keep_that_does_not_fit_the_filesystem_is_flagged():
    # 70e9 x 14 = 980 GB; keep 5 + the one being written = 5,880 GB > 4,800 GiB (5,154.0 GB)
    found = findings(spec_with({"parameters": "70B", "interval": "1h", "keep": 5}))
    full = [f for f in found if f.path == "checkpoint.keep"]
    assert len(full) == 1 and full[0].level is Severity.WARNING, found
    assert "5,880.0 GB" in full[0].message and "5,154.0 GB" in full[0].message, full[0].message
    assert not [
        f for f in findings(spec_with({"parameters": "70B", "keep": 4})) if f.path == "checkpoint.keep"
    ]


def test_scratch_2_and_managed_lustre_throughput():
    scratch = spec_with(
        {"parameters": "1B"},
        filesystem={"kind": "fsx_lustre", "size_gib": 2400, "deployment_type": "SCRATCH_2",
                    "throughput_per_tib": None},
    )  # fmt: skip
    assert scratch.checkpoint is not None
    assert checkpoint_figures(scratch, scratch.checkpoint).throughput.mb_s == pytest.approx(2400 / 1024 * 200)
    gcp = yaml.safe_load(yaml.safe_dump(AWS))
    gcp["provider"] = {
        "kind": "gcp",
        "project": "my-project-123",
        "region": "us-central1",
        "zone": "us-central1-a",
    }
    gcp["node_groups"] = [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "n2-standard-8"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "a3-highgpu-8g", "count": 2},
    ]
    gcp["fabric"] = "ethernet"
    gcp["filesystem"] = {"kind": "managed_lustre", "size_gib": 18000, "throughput_per_tib": 500}
    gcp["checkpoint"] = {"parameters": "8B"}
    spec = parse_spec(yaml.safe_dump(gcp))
    assert spec.checkpoint is not None
    assert checkpoint_figures(spec, spec.checkpoint).throughput.mb_s == pytest.approx(18000 / 1024 * 500)


def test_without_a_shared_filesystem_or_a_known_throughput():
    none = findings(spec_with({"parameters": "7B"}, filesystem={"kind": "none"}))
    assert [(f.level, f.path) for f in none] == [(Severity.WARNING, "filesystem")], none
    local = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    local["checkpoint"] = {"parameters": "125M", "state": "fp32-adam"}
    found = findings(parse_spec(yaml.safe_dump(local)))
    assert [(f.level, f.path) for f in found] == [
        (Severity.WARNING, "filesystem"),
        (Severity.INFO, "checkpoint"),
    ]
    assert "lost at 'gpufleet down'" in found[0].message and "Copy them off" in found[0].message, found
    assert "1.5 GB" in found[1].message and "not known here" in found[1].message, found
    assert findings(spec_with(None)) == []


def test_checkpoints_on_a_filesystem_deleted_with_the_cluster_and_no_durable_copy_are_flagged():
    """``check`` says it before the run, not only ``down`` at the end: FSx for Lustre and Managed Lustre
    are deleted with the cluster, and without a data_repository nothing keeps their checkpoints."""
    bare = dict(AWS["filesystem"])  # type: ignore[arg-type]
    del bare["data_repository"]
    found = findings(spec_with({"parameters": "7B", "interval": "2h"}, filesystem=bare))
    flagged = [f for f in found if f.path == "filesystem.data_repository"]
    assert [f.level for f in flagged] == [Severity.WARNING], found
    assert (
        "fsx_lustre filesystem" in flagged[0].message
        and "Add filesystem.data_repository" in flagged[0].message
    )
    # With the durable copy, nothing is said about it.
    kept = findings(spec_with({"parameters": "7B", "interval": "2h"}))
    assert not [f for f in kept if f.path.startswith("filesystem")], kept


@pytest.mark.parametrize(("text", "count"), [("7B", 7 * 10**9), ("1.5B", 15 * 10**8), ("125M", 125 * 10**6),
                                             (" 405b ", 405 * 10**9), (7000, 7000)])  # fmt: skip
def test_parameter_counts(text, count):
    assert CheckpointPlan(parameters=text).parameters == count


@pytest.mark.parametrize("bad", ["7X", "seven", "", {"parameters": 0}])
def test_a_bad_plan_says_what_is_expected(bad):
    data = bad if isinstance(bad, dict) else {"parameters": bad}
    with pytest.raises(ValidationError) as error:
        CheckpointPlan(**data)
    text = str(error.value)
    assert "parameter count such as 7B" in text or "greater than or equal to 1" in text, text
