"""Local and bare-metal commands start without Pulumi or a cloud SDK (issue 38, point 2): with the disk
full, gpufleet could not even start, since every command imported Pulumi, whatever the provider.

One interpreter in which Pulumi, its providers and the cloud SDKs cannot be imported (``sys.modules[name]
= None``: an import raises) runs every verb on a local and a bare-metal spec through Typer's runner. Each
ends as it would without the cloud packages installed at all: bare metal's up, status and down for real;
the others at the first thing this machine lacks (no cluster, no podman or ssh on the PATH); none with "a
bug in gpufleet" (70). Its first run found one: a bare-metal 'down' without ssh on the machine exited 70
(the utilization report's tunnel); it is now 'not available: ssh is not installed'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LOG = str(ROOT / "tests" / "validate" / "data" / "mpi-perf-all_gather-4rank-tagged.log")
BLOCKED = (
    "pulumi",
    "pulumi_aws",
    "pulumi_gcp",
    "pulumi_azure_native",
    "pulumi_tls",
    "boto3",
    "botocore",
    "google.cloud",
    "azure",
    "kubernetes",  # the Kubernetes scheduler's client: only a Kubernetes spec loads it
)

RUN = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
from typer.testing import CliRunner
from gpufleet.cli.app import app
results = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    results.append({{"args": args, "code": result.exit_code, "output": result.output[-2000:]}})
print("RESULTS " + json.dumps(results))
"""


def test_local_and_baremetal_commands_never_import_pulumi_or_a_cloud_sdk(tmp_path: Path) -> None:
    lab = yaml.safe_load((ROOT / "examples" / "baremetal.yaml").read_text())
    lab["provider"]["inventory"] = str(ROOT / "inventories" / "examples" / "baremetal.yml")
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(lab))
    # The same cluster with an image added: configure and validate import all they run, then stop (exit 7)
    # before reaching for the site's machines, which do not exist.
    lab["software"] = {"container_image": "nvcr.io#nvidia/pytorch:25.01-py3"}
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(lab))
    local = str(ROOT / "examples" / "local.yaml")
    bare, changed = str(tmp_path / "lab.yaml"), str(tmp_path / "changed.yaml")
    commands = [
        (["--help"], {0}),
        (["check", local], {0}),
        (["check", bare], {0}),
        (["up", local], {8}),  # no podman on this PATH: a host prerequisite, before anything is made
        (["run", "--no-bake", local], {8}),
        (["image", "list"], {0, 8}),
        (["status", local], {7, 8}),
        (["util", local], {7, 8}),
        (["up", bare], {0}),
        (["status", bare], {0}),
        (["configure", changed], {7}),
        (["validate", changed], {7}),
        (["report", LOG], {0, 1}),
        (["down", bare], {0}),
    ]
    env = {"PATH": str(tmp_path / "bin"), "GPUFLEET_STATE_DIR": str(tmp_path / "state")}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(blocked=BLOCKED), json.dumps([args for args, _ in commands])],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    for (args, codes), result in zip(commands, results, strict=True):
        assert result["code"] in codes and "halted" not in result["output"], (
            f"gpufleet {' '.join(args)} exited {result['code']} (expected {sorted(codes)}):\n"
            + result["output"]
        )
