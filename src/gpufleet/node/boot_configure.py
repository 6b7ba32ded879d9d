"""A node configures itself: the configure phase of playbooks/site.yml, run on the node by its baked unit.

``gpufleet-node-configure.service`` (roles/boot_configure) runs this file with the image's own python3
after the network is online and the node's facts are present (``gpufleet.inventory.node_facts``: a file
cloud-init or the local backend put there, or GCP's instance metadata). It

1. reads the facts, the node's inventory name (on an AWS fleet: its instance's ``gpufleet:host`` tag,
   through IMDSv2) and its own private address (the source address of its route to the controller);
2. refuses to run when the image is not the baked image the facts name (``/etc/gpufleet/baked-image``);
3. reads the munge key where the facts say (a read-only mounted file, or an AWS Secrets Manager secret
   read with the instance role's credentials, signed here with SigV4) into ``/run/gpufleet`` (tmpfs, 0400);
4. writes a one-node inventory (this node, ``ansible_connection: local``, and the controller's name and
   address for the roles that name it) and runs ``ansible-playbook --skip-tags install --limit <node>`` on
   the baked copy of the playbooks and roles, with the ansible-core baked for this Python (the one the head
   relay ships: ``gpufleet.configure.head_ansible``) and the relay's event callback (``gpufleet_events``);
0. (``--begin``, the unit's ExecStartPre) replaces the last run's result with one of this run, started and
   not finished, so that nobody reads the last boot's result as this one's;
5. writes the result (every task's status, the failed task and its message, the stats) as JSON to
   ``RESULT_FILE`` and to ``<shared filesystem>/.gpufleet/configure/<node>.json``, and exits 1 when the
   play failed, so systemd says so too.

Safe to re-run: the roles are idempotent, and the result is replaced atomically. ``gpufleet configure``
re-runs it on a running cluster by writing a run id to ``RUN_DIR/RUN_NAME`` and starting the unit; the result
carries that id ("boot" when none was asked for). Standard library only (tests/node/test_node_files.py).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

# The same paths as gpufleet.inventory.node_facts (tests/node/test_boot_configure.py holds them equal).
FACTS_FILE = "/var/lib/gpufleet/boot/node-facts.json"
METADATA_KEY = "gpufleet-node-facts"
RESULT_FILE = "/var/lib/gpufleet/configure-result.json"
SITE = "/opt/gpufleet/site"  # the baked playbooks, roles, ansible-core (roles/boot_configure)
IMAGE_FILE = "/etc/gpufleet/baked-image"  # the hash of the baked image, written by the bake
RUN_DIR = "/run/gpufleet"
RUN_NAME = "configure-run"  # in RUN_DIR: the run id gpufleet configure asked for
EVENT_MARK = "GPUFLEET_EVENT "
IMDS = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
HOST_TAG = "gpufleet:host"
# How long a node waits for what comes after it boots: its fleet tag, the munge key's secret value; and
# how long between two tries.
WAIT_S = 900.0
RETRY_S = 10.0
# The result's failure when systemd stops the unit at its RuntimeMaxSec (roles/boot_configure's unit).
TIME_LIMIT = "the node's configure ran past its time limit (RuntimeMaxSec)"
# A stop well before the time limit is something else stopping the unit: the node shutting down or
# restarting (a stopped or rebooted node), or 'systemctl stop'/'restart' (gpufleet configure's re-run).
STOPPED = (
    "systemd stopped the node's configure after {elapsed:.0f} s, before its play finished: the node shut "
    "down or restarted, or the unit was stopped; its next start runs the play again"
)
# How close to the time limit a stop counts as the time limit (systemd's stop and the clock's reading).
LIMIT_SLACK_S = 30.0
MOUNTINFO = "/proc/self/mountinfo"
# How long --begin gives the shared filesystem to take the started result (the boot's start job waits).
SHARED_WRITE_S = 10.0


class BootError(Exception):
    """Configure cannot start on this node; the message goes into the result as its failed step."""

    def __init__(self, step: str, message: str, broken: bool = False) -> None:
        super().__init__(message)
        self.step = step
        self.message = message
        # Facts that are there but cannot be read: ``--check`` fails the unit (exit 255) instead of
        # skipping it (exit 1: systemd.service(5), ExecCondition= "1 through 254 ... skipped").
        self.broken = broken


class TimeLimit(BaseException):
    """systemd stops the unit (SIGTERM at RuntimeMaxSec): raised in the main thread by the handler."""


def _stop(signum: int, frame: object) -> None:
    raise TimeLimit()


# ---- facts, name, address --------------------------------------------------------------------------


def _http(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", data: bytes | None = None
) -> str:
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    with urllib.request.urlopen(request, timeout=5) as answer:
        return str(answer.read().decode())


def _facts_object(text: str, where: str) -> dict[str, Any]:
    try:
        facts = json.loads(text)
    except ValueError as exc:
        facts, problem = None, f"not JSON ({exc})"
    else:
        problem = f"a JSON {type(facts).__name__}, not an object"
    if not isinstance(facts, dict):
        raise BootError(
            "facts",
            f"{where} is {problem}: the node cannot configure itself; gpufleet up writes it (run "
            "'gpufleet up' again, or 'gpufleet configure' pushes to this node)",
            broken=True,
        )
    return facts


def read_facts(path: str = FACTS_FILE) -> dict[str, Any]:
    """The facts file, or GCP's instance metadata key where no file is (GCP nodes)."""
    if Path(path).exists():
        return _facts_object(Path(path).read_text(encoding="utf-8", errors="replace"), path)
    try:
        answer = _http(GCP_METADATA + METADATA_KEY, {"Metadata-Flavor": "Google"})
    except OSError as exc:
        raise BootError("facts", f"no {path} and no metadata key {METADATA_KEY}: {exc}") from None
    return _facts_object(answer, f"the instance metadata key {METADATA_KEY}")


def imds_token() -> str:
    return _http(f"{IMDS}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"}, "PUT")


def host_name(facts: dict[str, Any], wait_s: float = WAIT_S) -> str:
    """The node's inventory name: the facts', or (an AWS fleet's node) its instance's gpufleet:host tag,
    which the program adds once the fleet has launched (infra/aws/fleet.py)."""
    if facts.get("host"):
        return str(facts["host"])
    deadline = time.monotonic() + wait_s
    while True:
        try:
            token = imds_token()
            return _http(
                f"{IMDS}/latest/meta-data/tags/instance/{HOST_TAG}", {"X-aws-ec2-metadata-token": token}
            )
        except OSError as exc:
            if time.monotonic() > deadline:
                raise BootError(
                    "host name", f"no instance tag {HOST_TAG} after {wait_s:.0f} s: {exc}"
                ) from None
        time.sleep(RETRY_S)


def own_address(controller_address: str | None) -> str:
    """The source address of this node's route to the controller (to any address on the controller)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((controller_address or "192.0.2.1", 9))  # no packet is sent (UDP connect)
        return str(probe.getsockname()[0])
    finally:
        probe.close()


# ---- the munge key -----------------------------------------------------------------------------------


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def secretsmanager_request(
    region: str,
    secret_arn: str,
    credentials: dict[str, str],
    now: datetime.datetime,
    endpoint: str | None = None,
) -> tuple[str, dict[str, str], bytes]:
    """A signed ``GetSecretValue`` request (AWS Signature Version 4, the JSON 1.1 protocol): URL, headers,
    body. https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html, read 2026-11-27.
    ``endpoint``: the facts' (``MungeKeyFrom.endpoint``: boto3's for the region at gpufleet up, so another
    partition's domain, FIPS or dual-stack as the user's configuration asks); facts written before it was
    recorded name none, and only the aws partition's endpoint is assumed for them."""
    endpoint = (endpoint or f"https://secretsmanager.{region}.amazonaws.com").rstrip("/")
    host = urllib.parse.urlsplit(endpoint).netloc
    body = json.dumps({"SecretId": secret_arn}).encode()
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {
        "content-type": "application/x-amz-json-1.1",
        "host": host,
        "x-amz-date": stamp,
        "x-amz-target": "secretsmanager.GetSecretValue",
    }
    if credentials.get("Token"):
        headers["x-amz-security-token"] = credentials["Token"]
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "POST",
            "/",
            "",
            *(f"{name}:{headers[name]}" for name in sorted(headers)),
            "",
            signed,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/secretsmanager/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(("AWS4" + credentials["SecretAccessKey"]).encode(), day)
    for part in (region, "secretsmanager", "aws4_request"):
        key = _sign(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials['AccessKeyId']}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    return f"{endpoint}/", headers, body


def _role_credentials() -> dict[str, str]:
    token = imds_token()
    headers = {"X-aws-ec2-metadata-token": token}
    base = f"{IMDS}/latest/meta-data/iam/security-credentials/"
    role = _http(base, headers).split()[0]
    return dict(json.loads(_http(base + role, headers)))


class NotYet(Exception):
    """The secret cannot be read now and may be later: why, and what makes it readable."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


# Secrets Manager's errors (the JSON body's ``__type``) that no retry mends: the role may not read it.
# https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html#API_GetSecretValue_Errors
# and CommonErrors.html, read 2026-11-28.
DENIED = ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException")


def _aws_error(error: urllib.error.HTTPError) -> tuple[str, str]:
    """The error's type and message from its JSON body (urllib says only "HTTP Error 400")."""
    try:
        answer = json.loads(error.read().decode(errors="replace") or "{}")
    except (OSError, ValueError):
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    kind = str(answer.get("__type") or f"HTTP {error.code}").rsplit("#", 1)[-1]
    message = str(answer.get("message") or answer.get("Message") or error.reason or "")
    return kind, message


def _secret_value(source: dict[str, Any]) -> bytes:
    """The secret's value. ``NotYet`` while it cannot be read (no value put yet, no credentials yet, no
    route to the endpoint); ``BootError`` when it never will be (the role may not read it)."""
    arn, endpoint = str(source["secret_arn"]), source.get("endpoint")
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (3.10 has no datetime.UTC)
    try:
        credentials = _role_credentials()
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise NotYet(
            f"no instance role credentials from IMDS ({exc})",
            "the node's instance profile gives them (infra/aws/component.py)",
        ) from None
    url, headers, body = secretsmanager_request(source["region"], arn, credentials, now, endpoint)
    try:
        answer = _http(url, headers, "POST", body)
    except urllib.error.HTTPError as error:
        kind, message = _aws_error(error)
        said = f"{kind}: {message}".rstrip(": ")
        if kind in DENIED:
            raise BootError(
                "munge key",
                f"{url} refused GetSecretValue on {arn} ({said}): the node role's inline policy "
                "(<cluster>-node-munge-read, infra/aws/munge_secret.py) must allow "
                "secretsmanager:GetSecretValue on that ARN; run 'gpufleet up' again to restore it",
            ) from None
        if kind == "ResourceNotFoundException":
            raise NotYet(
                said, "gpufleet up puts the value once its stack is up: run 'gpufleet up' again"
            ) from None
        if "Signature" in kind or "expired" in message.lower():
            raise NotYet(
                said, "the node's clock must be within 5 minutes of AWS's (SigV4): check time sync"
            ) from None
        raise NotYet(said, "Secrets Manager answered an error; it is retried") from None
    except OSError as exc:  # no route, no name, refused, timed out
        raise NotYet(
            f"cannot reach {url} ({exc})",
            "a private subnet needs NAT or a secretsmanager VPC endpoint (interface endpoint "
            f"com.amazonaws.{source['region']}.secretsmanager, private DNS on)",
        ) from None
    try:
        return base64.b64decode(json.loads(answer)["SecretBinary"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NotYet(
            f"the secret's value is no binary munge key ({type(exc).__name__}: {exc})",
            "gpufleet up puts it as SecretBinary: run 'gpufleet up' again",
        ) from None


def munge_key(source: dict[str, Any], wait_s: float = WAIT_S) -> str:
    """The path of the munge key on this node (the facts' file, or the secret's value written to
    ``RUN_DIR``, readable by root only). The secret's value is put by gpufleet up after the program ran,
    so a node that boots first waits for it."""
    if source["kind"] == "file":
        if not Path(source["path"]).exists():
            raise BootError("munge key", f"{source['path']} is not there (the local backend mounts it)")
        return str(source["path"])
    deadline = time.monotonic() + wait_s
    data: bytes | None = None
    while data is None:
        try:
            data = _secret_value(source)
        except NotYet as problem:
            print(f"gpufleet-node-configure: munge key not readable yet: {problem.message}", file=sys.stderr)
            if time.monotonic() > deadline:
                raise BootError(
                    "munge key",
                    f"cannot read {source['secret_arn']} within {wait_s:.0f} s; the last try: "
                    f"{problem.message}; {problem.fix}",
                ) from None
            time.sleep(RETRY_S)
    Path(RUN_DIR).mkdir(mode=0o700, parents=True, exist_ok=True)
    path = f"{RUN_DIR}/munge.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


# ---- the play and its result ----------------------------------------------------------------------------


def local_inventory(facts: dict[str, Any], host: str, address: str, python: str) -> dict[str, Any]:
    """This node (``-c local``) in its groups, and the controller under its name and address (the roles
    that name it: slurmd's --conf-server, /etc/hosts), which the play never connects to (``--limit``)."""
    mine = {
        **facts["host_vars"],
        "ansible_connection": "local",
        "ansible_host": "127.0.0.1",
        "ansible_python_interpreter": python,
        "gpufleet_private_ip": address,
    }
    children: dict[str, Any] = {group: {"hosts": {host: mine}} for group in facts["groups"]}
    for peer in facts.get("peers") or []:  # the compute nodes, never connected to
        addresses = peer.get("addresses") or []
        for index, name in enumerate(peer_names(peer)):
            known = {"gpufleet_private_ip": addresses[index]} if index < len(addresses) else {}
            for group in peer["groups"]:
                members = children.setdefault(group, {"hosts": {}})["hosts"]
                members.setdefault(name, {**peer["host_vars"], **known})
    controller = facts["controller"]
    if controller != host:
        ctl = {
            "ansible_host": facts["controller_address"],
            "gpufleet_private_ip": facts["controller_address"],
        }
        children.setdefault("slurm_controller", {"hosts": {}})["hosts"][controller] = ctl
    return {"all": {"vars": facts["cluster_vars"], "children": children}}


def peer_names(peer: dict[str, Any]) -> list[str]:
    """A peer group's host names: gpufleet.inventory.node_facts.PeerGroup.names, on the node."""
    if peer["count"] == 1 and "compute" not in peer["groups"]:
        return [peer["base"]]
    width = max(1, len(str(peer["count"] - 1)))
    return [f"{peer['base']}-{index:0{width}d}" for index in range(peer["count"])]


def failure_message(result: dict[str, Any]) -> str:
    """Why a task failed, in its own words (gpufleet.configure.runner.PlayEvents reads failures so too)."""
    message = result.get("msg") or result.get("stderr") or result.get("module_stderr") or "failed"
    stderr = str(result.get("stderr") or "").strip()
    if stderr and stderr not in str(message):  # a command's "non-zero return code": say its words
        message = f"{message}: {stderr}"
    if result.get("_ansible_no_log"):
        message = "(output hidden: the task handles a secret)"
    return str(message).strip()[:1500]


def read_events(lines: list[str], host: str) -> dict[str, Any]:
    """Every task's status on this node, the first failure and the stats, from the event lines.
    A task that started and has no result for the node was skipped (the callback prints no skip events)."""
    tasks: list[dict[str, str]] = []
    failed: dict[str, str] | None = None
    stats: dict[str, Any] = {}
    for line in lines:
        at = line.find(EVENT_MARK)
        if at < 0:
            continue
        try:
            event = json.loads(line[at + len(EVENT_MARK) :])
        except ValueError:
            continue
        kind, data = event.get("event"), event.get("event_data") or {}
        if kind == "playbook_on_task_start":
            tasks.append({"task": str(data.get("task", "")), "status": "skipped"})
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable") and tasks:
            res = data.get("res") or {}
            if kind == "runner_on_ok":
                status = "changed" if res.get("changed") else "ok"
            elif kind == "runner_on_failed" and data.get("ignore_errors"):
                status = "ignored"
            else:
                status = "failed" if kind == "runner_on_failed" else "unreachable"
                if failed is None:
                    failed = {"task": tasks[-1]["task"], "message": failure_message(res)}
            tasks[-1]["status"] = status
        elif kind == "playbook_on_stats":
            stats = {
                key: (value or {}).get(host, 0) for key, value in data.items() if isinstance(value, dict)
            }
    return {"tasks": tasks, "failed": failed, "stats": stats}


def play_command(site: str, inventory: str, extravars: str, host: str) -> tuple[list[str], dict[str, str]]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{site}/py",
        "ANSIBLE_CONFIG": f"{site}/ansible.cfg",
        "ANSIBLE_ROLES_PATH": f"{site}/roles",
        "ANSIBLE_COLLECTIONS_PATH": f"{site}/collections",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_STDOUT_CALLBACK": "gpufleet_events",
        "ANSIBLE_CALLBACK_PLUGINS": f"{site}/callback_plugins",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [
        sys.executable,
        "-c",
        "import sys; from ansible.cli.playbook import main; sys.argv[0] = 'ansible-playbook'; main()",
        "-i",
        inventory,
        "-e",
        f"@{extravars}",
        "--limit",
        host,
        "--skip-tags",
        "install",
        f"{site}/playbooks/site.yml",
    ]
    return argv, env


def write_result(result: dict[str, Any], paths: list[str]) -> list[str]:
    """Write the result to each path (atomically: a reader sees the old or the new); the paths it could
    not write, with why, are returned (a shared filesystem not mounted yet is the play's failure to say)."""
    text = json.dumps(result, sort_keys=True, indent=1) + "\n"
    problems = []
    for path in paths:
        try:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
            temporary.write_text(text, encoding="utf-8")
            temporary.chmod(0o644)
            temporary.replace(target)
        except OSError as exc:
            problems.append(f"{path}: {exc}")
    return problems


def run_play(argv: list[str], env: dict[str, str], site: str, log: Path, lines: list[str]) -> int:
    """Run the play, each line of its output into ``log`` (and the unit's journal) as it comes, and into
    ``lines``; its exit code. Stopped (``TimeLimit``), it ends the play's whole process group first."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8", buffering=1) as out:
        play = subprocess.Popen(
            argv,
            env=env,
            cwd=site,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        assert play.stdout is not None
        try:
            for line in play.stdout:
                out.write(line)
                sys.stdout.write(line)
                sys.stdout.flush()
                lines.append(line.rstrip("\n"))
            return play.wait()
        except BaseException:
            _end(play)
            raise
        finally:
            play.stdout.close()


def _end(play: subprocess.Popen[str]) -> None:
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(play.pid, sent)
        except OSError:
            return
        try:
            play.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def run_id() -> str:
    try:
        return Path(RUN_DIR, RUN_NAME).read_text(encoding="utf-8").strip() or "boot"
    except OSError:
        return "boot"


def _new_result(facts: dict[str, Any], started: float) -> dict[str, Any]:
    return {
        "version": 1,
        "host": facts.get("host"),
        "run": run_id(),
        "image": facts.get("baked_image_hash"),
        "started": started,
        "finished": None,
        "ok": False,
        "tasks": [],
        "failed": None,
        "stats": {},
        "rc": None,
    }


def begin(facts: dict[str, Any]) -> list[str]:
    """The unit's ExecStartPre: a result that says this run has started and not finished (``finished``
    null), in place of the last run's, before the start job ends. A node stopped mid-play wrote "stopped"
    as its result, and a node whose own play failed wrote that: without this, ``gpufleet configure`` after
    the node's next boot (a re-run of ``up`` starts stopped nodes) would read the last boot's result as this
    one's until the new play ends. The node's own file first; then the shared copy, which needs the node's
    name: from the facts, where they name it (local, GCP); an AWS node learns it from its tag, so only its
    own file is replaced here (its shared file is the old boot's until its play writes the new one). The
    shared copy only where a filesystem is mounted there already (``mounted_under``: a cloud node's play
    mounts it, and before that it holds no old result), and written by a child given ``SHARED_WRITE_S``: a
    hung filesystem must not hold the boot's start job (the play names it). The paths not written, why."""
    result = _new_result(facts, time.time())
    local, *shared = _result_paths(facts, facts.get("host"))
    problems = write_result(result, [local])
    for path in shared:
        if mounted_under(path):
            problems += _write_within(result, path, SHARED_WRITE_S)
    return problems


def mounted_under(path: str, mountinfo: str | None = None) -> bool:
    """Whether a filesystem other than the root one is mounted at or above ``path``, and is not an automount
    point (its first access would mount it, and may hang): read from the kernel's mount table, without
    touching the filesystem. The last of several mounts at one point is the one on top."""
    try:
        table = Path(mountinfo or MOUNTINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    best, kind = "", ""
    for line in table.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right.split():
            continue
        point = fields[4].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
            best, kind = point, right.split()[0]
    return best not in ("", "/") and kind != "autofs"


# A child that writes the result on stdin to argv[2] with this file's own write_result (argv[1]: its folder).
_WRITE = (
    "import json, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from boot_configure import write_result\n"
    "problems = write_result(json.load(sys.stdin), [sys.argv[2]])\n"
    "print('; '.join(problems), file=sys.stderr)\n"
    "sys.exit(1 if problems else 0)\n"
)


def _write_within(result: dict[str, Any], path: str, limit: float) -> list[str]:
    """``write_result`` of ``result`` to ``path`` in a child process given ``limit`` seconds; why not."""
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITE, str(Path(__file__).resolve().parent), path],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = child.communicate(json.dumps(result), timeout=limit)
    except subprocess.TimeoutExpired:
        child.kill()  # not waited for: a child stuck in a hung filesystem holds nothing of this unit's start
        return [f"{path}: its filesystem did not answer in {limit:.0f} s"]
    return [] if child.returncode == 0 else [err.strip()[-300:] or f"{path}: exit {child.returncode}"]


def _result_paths(facts: dict[str, Any], host: str | None) -> list[str]:
    paths = [facts.get("result_file", RESULT_FILE)]
    if facts.get("shared_results") and host:
        paths.append(f"{facts['shared_results']}/{host}.json")
    return paths


def configure(facts: dict[str, Any], site: str = SITE, time_limit: float | None = None) -> dict[str, Any]:
    """Run the configure phase on this node; the result (see the module doc)."""
    started, clock = time.time(), time.monotonic()  # the clock for how long: a boot may step the time
    result = _new_result(facts, started)
    try:
        host = host_name(facts)
        result["host"] = host
        try:
            found = Path(IMAGE_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            found = ""
        if found != facts["baked_image_hash"]:
            raise BootError(
                "image",
                f"this node runs the image {found[:12] or '(none recorded)'}, the cluster expects "
                f"{facts['baked_image_hash'][:12]}: gpufleet configure pushes to such a node instead",
            )
        key = munge_key(facts["munge_key"])
        address = own_address(facts.get("controller_address"))
        Path(RUN_DIR).mkdir(mode=0o700, parents=True, exist_ok=True)
        inventory, extravars = f"{RUN_DIR}/inventory.json", f"{RUN_DIR}/extravars.json"
        Path(inventory).write_text(json.dumps(local_inventory(facts, host, address, sys.executable)))
        Path(extravars).write_text(json.dumps({"munge_key_file": key, "gpufleet_node_files": f"{site}/node"}))
        argv, env = play_command(site, inventory, extravars, host)
        log = Path(facts.get("result_file", RESULT_FILE)).with_suffix(".log")
        lines: list[str] = []
        try:
            rc = run_play(argv, env, site, log, lines)
        finally:  # the tasks so far, also when the unit is stopped
            result.update(read_events(lines, host))
        result["rc"] = rc
        if rc != 0 and result["failed"] is None:
            tail = "".join(lines).strip()[-600:]
            result["failed"] = {"task": "ansible-playbook", "message": f"exited {rc}: {tail}"}
    except BootError as refused:
        result["failed"] = {"task": f"boot: {refused.step}", "message": refused.message}
    except TimeLimit:
        elapsed = time.monotonic() - clock
        if time_limit is None or elapsed >= time_limit - LIMIT_SLACK_S:
            result["failed"] = {"task": "boot: time limit", "message": TIME_LIMIT}
        else:
            result["failed"] = {"task": "boot: stopped", "message": STOPPED.format(elapsed=elapsed)}
    result["finished"] = time.time()
    result["ok"] = result["failed"] is None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", default=FACTS_FILE)
    parser.add_argument("--site", default=SITE)
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 0 when the node has facts, 1 when not, 255 when they do not parse (ExecCondition)",
    )
    parser.add_argument(
        "--begin",
        action="store_true",
        help="write the result of a run that has started (ExecStartPre), replacing the last run's",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="the unit's RuntimeMaxSec: a stop well before it is named a stop, not the time limit",
    )
    args = parser.parse_args(argv)
    if args.begin:  # never fails the unit (and the unit runs it with "-"): the play says what is wrong
        try:
            problems = begin(read_facts(args.facts))
        except Exception as exc:  # whatever it is, the play runs next and names it
            problems = [f"{type(exc).__name__}: {exc}"]
        for problem in problems:
            print(f"gpufleet-node-configure: cannot write the started result {problem}", file=sys.stderr)
        return 0
    try:
        facts = read_facts(args.facts)
    except BootError as refused:
        print(f"gpufleet-node-configure: {refused.message}", file=sys.stderr)
        if refused.broken:  # the unit fails (255), it is not skipped (1)
            return 255
        return 1 if args.check else 2
    if args.check:  # facts whose munge key comes by push: gpufleet configure pushes to this node
        return 1 if (facts.get("munge_key") or {}).get("kind") == "push" else 0
    # systemd's stop (RuntimeMaxSec, or systemctl stop) ends the play and writes the result saying so.
    before = signal.signal(signal.SIGTERM, _stop)
    try:
        result = configure(facts, args.site, args.time_limit)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the result is written whatever comes now
        return _finish(facts, result)
    finally:
        signal.signal(signal.SIGTERM, before)


def _finish(facts: dict[str, Any], result: dict[str, Any]) -> int:
    problems = write_result(result, _result_paths(facts, result.get("host")))
    for problem in problems:
        print(f"gpufleet-node-configure: cannot write the result {problem}", file=sys.stderr)
    failed = result["failed"]
    if failed:
        print(f"gpufleet-node-configure: {failed['task']}: {failed['message']}", file=sys.stderr)
    return 0 if result["ok"] and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
