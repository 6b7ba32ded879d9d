"""Bad input, as a new or careless user gives it: a clear message, the field, the fix, the documented exit
code, never a traceback. Table-driven, through Typer's test runner; the bad specs are files in
``bad_specs/`` (each says what is wrong with it in its name)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli.app import app
from gpufleet.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).resolve().parent / "bad_specs"
NCCL = ROOT / "tests" / "fixtures" / "nccl-tests"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "2000"})  # no table folds a message
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"gpufleet {' '.join(args)} crashed: {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.stdout, result.stderr


# (spec file in bad_specs/, a fragment of what the user reads, exit code)
SPEC_CASES = [
    (
        "duplicate-count.yaml",
        "key 'count' is given twice in the same block: line 10 and line 11",
        ExitCode.SPEC,
    ),
    ("tab.yaml", "line 5: a tab character; YAML indents with spaces only", ExitCode.SPEC),
    ("unclosed-bracket.yaml", "the '[' opened at line 5, column 12 is not closed with ']'", ExitCode.SPEC),
    ("bad-indent.yaml", "line 4: a 'key: value' where YAML expected none", ExitCode.SPEC),
    ("bad-indent-2.yaml", "indented differently from the keys around it", ExitCode.SPEC),
    ("empty.yaml", "is empty: there is no spec in it", ExitCode.SPEC),
    ("comments-only.yaml", "is only comments: there is no spec in it", ExitCode.SPEC),
    ("latin1.yaml", "is not UTF-8 text: byte 0xe9 at line 1", ExitCode.SPEC),
    ("binary.bin", "is a binary file, not YAML text", ExitCode.SPEC),
    ("deep.yaml", "nested too deeply to be a spec", ExitCode.SPEC),
    ("billion-laughs.yaml", "expand to more than 100000 values", ExitCode.SPEC),
    ("count-yes.yaml", "YAML reads yes as a boolean", ExitCode.SPEC),
    (
        "cuda-float.yaml",
        'YAML reads 12.10 as the number 12.1; this field takes text: quote it, "12.10"',
        ExitCode.SPEC,
    ),
    ("ttl-overflow.yaml", "far too long a duration", ExitCode.SPEC),
    ("bytes-overflow.yaml", "too large a size", ExitCode.SPEC),
    ("count-huge.yaml", "node_groups[1].count", ExitCode.SPEC),
    ("aws-no-region.yaml", "provider.region (line 3)\n      this field is required", ExitCode.SPEC),
    ("fsx-no-size.yaml", "filesystem.size_gib (line 16)\n      this field is required", ExitCode.SPEC),
    (
        "baremetal-no-inventory.yaml",
        "provider.inventory (line 3)\n      this field is required",
        ExitCode.SPEC,
    ),
    ("baremetal-missing-inventory.yaml", "no-such-inventory.yml does not exist", ExitCode.FAILED),
    (
        "baremetal-unknown-type.yaml",
        "'dgx-h10', which the catalog does not know (did you mean dgx-h100",
        ExitCode.FAILED,
    ),
    ("gcp-long-names.yaml", "would be 67 characters; the limit is 63", ExitCode.FAILED),
]


@pytest.mark.parametrize(("name", "fragment", "code"), SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_check_explains_a_bad_spec(name: str, fragment: str, code: ExitCode) -> None:
    exit_code, stdout, stderr = invoke("check", "--level", "error", str(BAD / name))
    assert exit_code == code, stdout + stderr
    assert fragment in stdout + stderr, stdout + stderr


@pytest.mark.parametrize(("name", "fragment", "code"), SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_check_json_is_one_document_on_every_outcome(name: str, fragment: str, code: ExitCode) -> None:
    exit_code, stdout, _ = invoke("check", "--json", str(BAD / name))
    document = json.loads(stdout)  # nothing but the one document on stdout
    assert exit_code == code
    if code == ExitCode.SPEC:
        assert document["ok"] is False
        assert document["error"]["exit_code"] == code and document["error"]["kind"] == "spec"
        assert fragment.split("\n")[0] in document["error"]["message"]
    else:
        assert document["ok"] is False and any(f["level"] == "error" for f in document["findings"])


@pytest.mark.parametrize(
    ("args", "fragment", "code"),
    [
        (["check", "no-such.yaml"], "spec file no-such.yaml does not exist", ExitCode.SPEC),
        (["check", str(BAD)], "is a folder, not a spec file", ExitCode.SPEC),
        (["check", "--level", "loud", str(ROOT / "examples" / "local.yaml")], "loud", ExitCode.USAGE),
        (["chek"], "No such command", ExitCode.USAGE),
        (
            ["up", str(BAD / "gcp-long-names.yaml")],
            "fails 1 preflight check(s); nothing was created",
            ExitCode.SPEC,
        ),
        (["up", str(BAD / "baremetal-missing-inventory.yaml")], "nothing was created", ExitCode.SPEC),
        (
            ["run", "--slow-node", str(ROOT / "examples" / "local.yaml")],
            "provider.net_admin: true",
            ExitCode.SPEC,
        ),
    ],
)
def test_command_line_mistakes(args: list[str], fragment: str, code: ExitCode) -> None:
    exit_code, stdout, stderr = invoke(*args)
    assert exit_code == code, stdout + stderr
    assert fragment in stdout + stderr


def test_json_on_a_usage_error_is_one_document() -> None:
    exit_code, stdout, _ = invoke("check", "--json", "--bogus", str(ROOT / "examples" / "local.yaml"))
    assert exit_code == ExitCode.USAGE
    error = json.loads(stdout)["error"]
    assert error == {
        "kind": "usage",
        "type": "NoSuchOption",
        "message": "No such option: --bogus",
        "hint": None,
        "exit_code": 2,
    }


def test_version_and_short_help() -> None:
    code, stdout, _ = invoke("--version")
    assert code == 0 and stdout.startswith("gpufleet ") and stdout.split()[1][0].isdigit()
    code, stdout, _ = invoke("-h")
    assert code == 0 and "Usage" in stdout and "check" in stdout
    code, stdout, _ = invoke("check", "-h")
    assert code == 0 and "--json" in stdout


# ---- status and down of a cluster that never existed: exit 7 on every provider ---------------------


def _spec_for(provider: str, tmp_path: Path) -> Path:
    example = {
        "local": "local.yaml",
        "aws": "aws-p5.yaml",
        "gcp": "gcp-a3-mega.yaml",
        "baremetal": "baremetal.yaml",
    }
    data = yaml.safe_load((ROOT / "examples" / example[provider]).read_text())
    data["name"] = "never-made"
    if provider == "baremetal":
        data["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
    path = tmp_path / f"{provider}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("provider", ["aws", "gcp", "baremetal", "local"])
@pytest.mark.parametrize("command", ["status", "down"])
def test_a_cluster_that_never_existed_is_exit_7(provider, command, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    if provider == "local":  # no podman objects labelled for it, whether or not podman is installed
        monkeypatch.setattr("gpufleet.lifecycle.known.local_objects", lambda spec: [])
    exit_code, stdout, stderr = invoke(command, "--json", str(_spec_for(provider, tmp_path)))
    assert exit_code == ExitCode.STATE, stdout + stderr
    error = json.loads(stdout)["error"]
    assert error["kind"] == "state" and "no cluster named 'never-made'" in error["message"]
    assert not (tmp_path / "state" / "never-made").exists()


def test_a_second_down_says_already_removed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = _spec_for("baremetal", tmp_path)
    (tmp_path / "state" / "never-made").mkdir(parents=True)  # made by 'up' (bare metal keeps only state)
    assert invoke("down", str(spec))[0] == 0
    code, stdout, _ = invoke("down", "--json", str(spec))
    assert code == 0 and json.loads(stdout)["removed"] == []
    code, stdout, _ = invoke("status", "--json", str(spec))
    assert code == ExitCode.STATE and "was removed at" in json.loads(stdout)["error"]["message"]


def test_a_held_lock_refuses_a_second_command(tmp_path, monkeypatch) -> None:
    from gpufleet.lifecycle.lock import hold_cluster_lock, lock_path, release_all

    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    spec = _spec_for("baremetal", tmp_path)
    # Another process holds the lock (flock is per open file: a second open in this process competes).
    import fcntl

    lock_path("never-made").parent.mkdir(parents=True)
    with lock_path("never-made").open("w") as other:
        other.write("'gpufleet up' (pid 4242, since 12:00:00)\n")
        other.flush()
        fcntl.flock(other, fcntl.LOCK_EX)
        code, stdout, stderr = invoke("down", str(spec))
        assert code == ExitCode.BUSY, stdout + stderr
        assert "cluster 'never-made' is busy: 'gpufleet up' (pid 4242" in stderr
    hold_cluster_lock("never-made", "down")  # free again
    release_all()


# ---- report -----------------------------------------------------------------------------------------


def test_report_unknown_instance_type_is_an_error_with_close_matches() -> None:
    log = next(NCCL.glob("05-*.log"))
    code, stdout, stderr = invoke("report", "--instance-type", "p5.48xlarg", str(log))
    assert code == ExitCode.USAGE, stdout + stderr
    assert "did you mean p5.48xlarge" in " ".join(stderr.replace("│", " ").split())


def test_report_log_cut_mid_table_is_not_a_pass(tmp_path) -> None:
    full = next(NCCL.glob("05-*.log")).read_text().splitlines()
    header = next(
        i for i, line in enumerate(full) if "size" in line and "count" in line and line.startswith("#")
    )
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(full[: header + 6]) + "\n" + full[header + 6][:30])
    code, stdout, _ = invoke("report", "--json", str(cut))
    assert code == ExitCode.FAILED, stdout
    verdict = json.loads(stdout)["tests"][0]["verdict"]
    assert verdict["passed"] is False
    assert "summary lines" in json.dumps(verdict)
    code, _, _ = invoke("report", "--allow-incomplete", str(cut))  # an excerpt, judged as such
    assert code == 0


def test_report_one_unreadable_log_among_several(tmp_path) -> None:
    good = next(NCCL.glob("05-*.log"))
    bad = tmp_path / "notes.txt"
    bad.write_text("not a log\n")
    code, stdout, stderr = invoke("report", "--json", str(good), str(bad))
    assert code == ExitCode.VALIDATE, stdout + stderr
    document = json.loads(stdout)
    assert document["passed"] is False and len(document["tests"]) == 1
    assert document["tests"][0]["verdict"]["passed"] is True
    assert "notes.txt: line 1" in document["unreadable"][0]["message"]


# ---- reap ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe\x00", b'{"expires_at": 7}'])
def test_reap_skips_a_damaged_state_with_a_message(content: bytes, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "state.json").write_bytes(content)
    code, stdout, stderr = invoke("reap", "--json", "--dry-run")
    assert code == 0, stdout + stderr
    (item,) = json.loads(stdout)["local"]
    assert item["cluster"] == "broken" and item["action"].startswith("skipped: damaged state"), item


@pytest.mark.parametrize(
    "command", ["check", "plan", "up", "configure", "validate", "status", "down", "report"]
)
def test_every_json_command_prints_one_document_on_failure(command: str, tmp_path) -> None:
    exit_code, stdout, _ = invoke(command, "--json", str(tmp_path / "missing.yaml"))
    expected = ExitCode.VALIDATE if command == "report" else ExitCode.SPEC  # report reads logs, not specs
    assert exit_code == expected, stdout
    error = json.loads(stdout)["error"]
    assert error["exit_code"] == expected and "missing.yaml" in error["message"], error


def test_reap_json_is_one_document_when_there_is_nothing_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path))
    exit_code, stdout, _ = invoke("reap", "--json")
    assert exit_code == 0 and json.loads(stdout) == {"local": [], "aws": [], "gcp": [], "azure": []}
