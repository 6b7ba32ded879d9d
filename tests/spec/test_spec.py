"""The spec model: valid specs load, invalid ones fail with the field path, the value and the fix."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from gpufleet.errors import SpecError
from gpufleet.spec import CapacityMode, ClusterSpec, load_spec, parse_spec
from gpufleet.spec.model import SchedulerKind
from gpufleet.spec.units import format_bytes, parse_bytes, parse_duration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

LOCAL = {
    "name": "t",
    "provider": "local",
    "node_groups": [
        {"name": "head", "roles": ["controller"], "instance_type": "local"},
        {"name": "cpu", "roles": ["compute"], "instance_type": "local", "count": 2},
    ],
}
AWS = {
    "name": "p5",
    "provider": {"kind": "aws", "region": "us-east-2", "zone": "us-east-2b"},
    "node_groups": [
        {"name": "head", "roles": ["controller", "login"], "instance_type": "m7i.2xlarge"},
        {"name": "gpu", "roles": ["compute"], "instance_type": "p5.48xlarge", "count": 2},
    ],
    "fabric": "efa",
}


def with_change(base: dict, path: str, value: object) -> str:
    """A YAML spec: ``base`` with the dotted ``path`` set to ``value`` (``None`` deletes it)."""
    data = yaml.safe_load(yaml.safe_dump(base))
    node = data
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parts[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    if value is None:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_valid(path: Path) -> None:
    spec = load_spec(path)
    if spec.scheduler.kind is SchedulerKind.SLURM:  # a Kubernetes cluster has no Slurm controller to make
        assert spec.controller_group.count == 1
    assert spec.compute_count >= 1


def test_defaults_are_safe() -> None:
    spec = parse_spec(yaml.safe_dump(AWS))
    assert spec.access.allowed_cidrs == []
    assert spec.lifetime.ttl == timedelta(hours=24)
    assert spec.validation.gate_min_bytes == 1 << 30
    assert spec.node_groups[1].capacity.mode is CapacityMode.ON_DEMAND


def test_host_names_are_stable_and_sorted() -> None:
    spec = parse_spec(with_change(LOCAL, "node_groups.1.count", 12))
    names = spec.host_names(spec.node_groups[1])
    assert names[0] == "t-cpu-00" and names[-1] == "t-cpu-11"
    assert names == sorted(names)
    assert spec.host_names(spec.controller_group) == ["t-head"]


def test_shorthands_expand() -> None:
    spec = parse_spec(yaml.safe_dump({**LOCAL, "fabric": "ethernet", "filesystem": "volume"}))
    assert spec.provider.kind == "local"
    assert spec.filesystem.kind == "volume"
    assert spec.filesystem.mount_point == "/shared"


# (base, path, value, expected substrings of the error; the first names the field)
INVALID = [
    (LOCAL, "name", "Bad_Name", ["name (line", "got 'Bad_Name'", "1-24 characters"]),
    (LOCAL, "node_groups.1.count", 0, ["node_groups[1].count", "got 0", "greater than or equal to 1"]),
    (LOCAL, "node_groups.1.countt", 3, ["node_groups[1]", "unknown key 'countt'", "did you mean 'count'"]),
    (LOCAL, "fabric", {"kind": "efaa"}, ["fabric.kind", "'efa', 'infiniband'"]),
    (LOCAL, "fabric", "efa", ["fabric.kind", "no 'efa' fabric", "set fabric: ethernet"]),
    (
        LOCAL,
        "node_groups.1.instance_type",
        "p5.48xlarge",
        ["node_groups[1].instance_type", "instance_type: local"],
    ),
    (LOCAL, "provider", {"kind": "ibmcloud"}, ["provider", "unknown kind", "'aws'"]),
    (LOCAL, "provider", {"kind": "azure"}, ["provider.subscription", "this field is required"]),
    (LOCAL, "node_groups.0.count", 2, ["node_groups[0]", "set count: 1"]),
    (
        LOCAL,
        "node_groups.1",
        {"name": "cpu", "roles": ["controller"], "instance_type": "local"},
        ["exactly one node group must have the controller role (found 2: head, cpu)"],
    ),
    (LOCAL, "node_groups.1.roles", ["login"], ["no node group has the compute role"]),
    (
        LOCAL,
        "filesystem",
        {"kind": "fsx_lustre", "size_gib": 1200},
        ["filesystem.kind", "not available with provider 'local'"],
    ),
    (LOCAL, "lifetime.ttl", "45d", ["lifetime.ttl", "between 15m and 30d"]),
    (LOCAL, "lifetime.ttl", "soon", ["lifetime.ttl", "90m, 8h, 2d"]),
    (
        LOCAL,
        "validation",
        {"max_bytes": "64M", "gate_min_bytes": "1G"},
        ["gate_min_bytes", "above max_bytes"],
    ),
    (LOCAL, "validation.min_busbw", {"all_reduce": -1}, ["min_busbw.all_reduce must be a positive"]),
    (LOCAL, "tags", {"Team": "ml"}, ["tags", "tag key 'Team'"]),
    (LOCAL, "tags", {"gpufleet-x": "y"}, ["tags", "not start with 'gpufleet'"]),
    (LOCAL, "access.ssh_public_key", "~/.ssh/id_ed25519.pub", ["access.ssh_public_key", "not a path"]),
    (LOCAL, "access.ssh_public_key", "hello", ["access.ssh_public_key", "ssh-ed25519 AAAA"]),
    (AWS, "access.allowed_cidrs", ["0.0.0.0/0"], ["access.allowed_cidrs", "'0.0.0.0/0' opens SSH"]),
    (AWS, "access.allowed_cidrs", ["10.0.0.1/8"], ["access.allowed_cidrs", "host bits"]),
    (AWS, "provider.zone", "us-west-2a", ["provider.zone", "not in region 'us-east-2'", "us-east-2a"]),
    (AWS, "provider.vpc_id", "vpc-0123456789abcdef0", ["give both vpc_id and subnet_id"]),
    (AWS, "provider.region", "useast", ["provider.region", "AWS region such as us-east-1"]),
    (
        AWS,
        "node_groups.1.capacity",
        {"mode": "reservation"},
        ["node_groups[1].capacity", "needs 'reservation'"],
    ),
    (AWS, "node_groups.1.capacity", {"mode": "spot", "reservation": "cr-1"}, ["only read with mode"]),
    (AWS, "filesystem", {"kind": "fsx_lustre", "size_gib": 100}, ["filesystem.size_gib", "got 100"]),
    (
        AWS,
        "filesystem",
        {"kind": "fsx_lustre", "size_gib": 1200, "deployment_type": "SCRATCH_2", "throughput_per_tib": 500},
        ["SCRATCH_2 has a fixed 200 MB/s"],
    ),
    (AWS, "software.cuda", "latest", ["software.cuda", "version such as 12.9"]),
]


@pytest.mark.parametrize(
    ("base", "path", "value", "expected"), INVALID, ids=[f"{c[1]}={c[2]}" for c in INVALID]
)
def test_invalid_specs_name_the_field_and_the_fix(base, path, value, expected) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(with_change(base, path, value), source="t.yaml")
    text = str(caught.value)
    assert text.startswith("spec t.yaml is not valid"), text
    for part in expected:
        assert part in text, f"{part!r} not in:\n{text}"
    assert "Traceback" not in text and "pydantic" not in text.lower(), text


def test_every_problem_is_listed_at_once() -> None:
    text = with_change(yaml.safe_load(with_change(LOCAL, "name", "X")), "node_groups.1.count", -1)
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    message = str(caught.value)
    assert "(2 problems)" in message
    assert "name" in message and "node_groups[1].count" in message


def test_line_numbers_point_at_the_value() -> None:
    text = (
        "name: t\nprovider: local\nnode_groups:\n  - name: head\n    roles: [controller]\n"
        "    instance_type: local\n  - name: cpu\n    roles: [compute]\n"
        "    instance_type: local\n    count: 0\n"
    )
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    assert "node_groups[1].count (line 10)" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed", "not valid YAML at line 1"),
        ("- just\n- a list\n", "must hold a mapping"),
    ],
)
def test_unreadable_files(text: str, expected: str) -> None:
    with pytest.raises(SpecError, match=expected):
        parse_spec(text)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


def test_spec_is_immutable() -> None:
    spec = parse_spec(yaml.safe_dump(LOCAL))
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"  # type: ignore[misc]
    assert isinstance(spec, ClusterSpec)


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("64K", 65536), ("16M", 16 << 20), ("1G", 1 << 30), ("16GiB", 16 << 30), (4096, 4096)],
)
def test_byte_sizes(text, value) -> None:
    assert parse_bytes(text) == value
    assert parse_bytes(format_bytes(value)) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("90m", timedelta(minutes=90)),
        ("8h", timedelta(hours=8)),
        ("1d12h", timedelta(hours=36)),
        (3600, timedelta(hours=1)),
    ],
)
def test_durations(text, value) -> None:
    assert parse_duration(text) == value
