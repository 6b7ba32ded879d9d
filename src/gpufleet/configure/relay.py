"""Configure from the head node: one connection from gpufleet's machine, Ansible run on the controller.

Today's ``configure`` (``run_playbook``) runs Ansible on the machine that runs gpufleet, with one SSH
connection (through its SSM or IAP tunnel on a cloud) per node and every task's control-side work done
there: that work grows with the node count (docs/architecture.md, "Configure at fleet scale").
With ``GPUFLEET_CONFIGURE_FROM=head`` gpufleet instead makes three SSH calls to the controller, whatever
the node count:

1. a probe: the head's ``$HOME``, its python3's version, architecture and glibc, and its core count;
2. one upload (a tar stream on stdin): playbooks/, roles/, ansible.cfg, the node files (gpufleet/node), the
   inventory rewritten for the head (every node at its private IP, the cluster's key, known_hosts and the
   node files in the relay folder, no tunnel),
   the extra variables, the munge key, and an ansible-core that runs on the head's own python3 with the
   collections the roles name (``head_ansible``: this machine's own where the head has its Python, else the
   wheels of a release that supports the head's Python, downloaded for it; never whatever the image ships);
3. ``ansible-playbook`` on the head, forks sized to its cores, its output streamed back; the key copies
   are removed when it ends, whatever its outcome.

The same playbook and roles run; only the machine that runs Ansible changes. Only the configure phase
(nodes from a current baked image) runs this way: the install phase reads downloads from this machine's
cache, and at fleet scale it belongs in the bake. Unset, the switch is ``auto``: from the head for aws and gcp
clusters of baked nodes (``runs_on_head``), from here for local and bare-metal ones and unbaked nodes.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpufleet.configure import head_ansible
from gpufleet.configure.head_ansible import NoAnsibleForHead, site_packages
from gpufleet.configure.remote import SshExecutor
from gpufleet.configure.runner import PlayEvents, PlayResult, play_error
from gpufleet.errors import ConfigureError
from gpufleet.inventory.model import Connection, Inventory
from gpufleet.node import FOLDER as NODE_FILES
from gpufleet.paths import project_root
from gpufleet.progress import Reporter
from gpufleet.providers import HEAD_BY_DEFAULT

SWITCH = "GPUFLEET_CONFIGURE_FROM"
CHOICES = ("auto", "here", "head")
RELAY_FOLDER = ".gpufleet-relay"
NODE_FOLDER = "node"  # in the relay folder: the files the roles copy to the nodes (gpufleet_node_files)
# ansible-core and what it imports (its requirements.txt: jinja2, PyYAML, cryptography, packaging,
# resolvelib; cryptography needs cffi, which needs pycparser), as top-level names in site-packages.
PACKAGES = (
    "ansible",
    "jinja2",
    "markupsafe",
    "yaml",
    "_yaml",
    "cryptography",
    "cffi",
    "_cffi_backend",
    "pycparser",
    "packaging",
    "resolvelib",
)
# The same, as distributions (their *.dist-info folders), lower-cased.
DISTRIBUTIONS = frozenset(
    {
        "ansible_core",
        "jinja2",
        "markupsafe",
        "pyyaml",
        "cryptography",
        "cffi",
        "pycparser",
        "packaging",
        "resolvelib",
    }
)
# The collections the roles name besides ansible.builtin (grep of roles/: ansible.posix.mount and
# sysctl, community.general.modprobe, community.docker.docker_image_pull).
COLLECTIONS = ("ansible/posix", "community/general", "community/docker")
# Ansible's workers mostly wait on SSH and the nodes: a few per core (ansible.cfg sets 32 on any machine).
FORKS_PER_CORE = 8
MAX_FORKS = 512

# Where the head's event lines come from (``head_callback``, shipped as a callback plugin), and
# ansible-runner's own pattern of the markers ``awx_display`` puts around each event's uuid in the text
# (``ansible_runner.utils.OutputEventFilter.EVENT_DATA_RE``), removed from the log.
HEAD_CALLBACK = Path(__file__).with_name("head_callback.py")
EVENT_MARK = "GPUFLEET_EVENT "
_EVENT_MARKER = re.compile(r"\x1b\[K(?:[A-Za-z0-9+/=]+\x1b\[\d+D)+\x1b\[K")


def chosen() -> str:
    """The switch: ``auto`` (unset), ``here`` or ``head``; a wrong value is an error."""
    value = os.environ.get(SWITCH, "auto").strip() or "auto"
    if value not in CHOICES:
        raise ConfigureError(
            f"{SWITCH}={value!r} is not one of {', '.join(CHOICES)}",
            hint=f"unset {SWITCH} (auto: from the head on aws and gcp clusters of baked nodes), or set it to "
            "'here' (Ansible runs on this machine) or 'head' (Ansible runs on the controller)",
        )
    return value


def runs_on_head(choice: str, inventory: Inventory, baked: str | None) -> bool:
    """Does ``configure`` run Ansible on the controller? ``head`` and ``here`` say so; ``auto`` says yes for
    a cluster of a backend that configures from the head by default (``providers.HEAD_BY_DEFAULT``: aws
    and gcp) whose nodes run a current baked image (only the configure phase runs from the head)."""
    if choice != "auto":
        return choice == "head"
    return bool(baked) and inventory.provider in HEAD_BY_DEFAULT


class Shell(Protocol):
    """Runs one command on the head; ``on_line`` gets each line of its output as it comes."""

    def __call__(
        self, command: str, *, stdin: bytes | None = None, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str]: ...


@dataclass
class SshShell:
    """The cluster's SSH to its controller, as ``SshExecutor`` reaches the login node (tunnel included)."""

    inventory: Inventory

    def argv(self, command: str) -> list[str]:
        return SshExecutor(self.inventory, self.inventory.controller).command(command)

    def __call__(
        self, command: str, *, stdin: bytes | None = None, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str]:
        process = subprocess.Popen(
            self.argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert process.stdin is not None and process.stdout is not None
        if stdin is not None:
            process.stdin.write(stdin)
        process.stdin.close()
        lines = []
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(line)
            if on_line is not None:
                on_line(line)
        return process.wait(), "\n".join(lines)


def head_inventory(inventory: Inventory, folder: str) -> Inventory:
    """The inventory as the head sees it: nodes at their private IPs, the relay folder's key, known_hosts
    and node files, no tunnel (the head is inside the cluster's network)."""
    hosts = [host.model_copy(update={"address": host.private_ip}) for host in inventory.hosts]
    connection = Connection(
        user=inventory.connection.user,
        private_key_file=f"{folder}/id_cluster" if inventory.connection.private_key_file else None,
        ssh_common_args=f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={folder}/known_hosts",
        become=inventory.connection.become,
    )
    return inventory.model_copy(
        update={"hosts": hosts, "connection": connection, "node_files": f"{folder}/{NODE_FOLDER}"}
    )


def forks_for(cores: int, hosts: int) -> int:
    return max(1, min(hosts, MAX_FORKS, FORKS_PER_CORE * max(1, cores)))


def _add_tree(archive: tarfile.TarFile, source: Path, name: str) -> None:
    archive.add(source, arcname=name, filter=lambda info: None if "__pycache__" in info.name else info)


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mode: int = 0o600) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))


def ansible_payload(packages: Path) -> list[tuple[Path, str]]:
    """What of this machine's site-packages the head needs to run the same ansible-core."""
    found: list[tuple[Path, str]] = []
    for name in PACKAGES:
        matches = [p for p in packages.glob(f"{name}*") if p.name == name or p.name.startswith(f"{name}.")]
        found.extend((p, f"py/{p.name}") for p in matches if not p.name.endswith(".dist-info"))
    # ansible-core asks importlib.metadata for its requirements' versions (Jinja2's first): their
    # dist-info folders go too.
    for info in packages.glob("*.dist-info"):
        if info.name.split("-", 1)[0].lower() in DISTRIBUTIONS:
            found.append((info, f"py/{info.name}"))
    for collection in COLLECTIONS:
        path = packages / "ansible_collections" / collection
        if path.is_dir():
            found.append((path, f"collections/ansible_collections/{collection}"))
    missing = [n for n in ("ansible", "jinja2", "yaml") if not (packages / n).exists()]
    if missing:
        raise ConfigureError(f"cannot ship Ansible to the head: {', '.join(missing)} not in {packages}")
    return found


def downloaded_payload(py: Path, collections_from: Path) -> list[tuple[Path, str]]:
    """A downloaded ansible-core's unpacked wheels (every package and dist-info but ansible-core's test
    tool), with this machine's collections (pure Python)."""
    found = [
        (path, f"py/{path.name}") for path in sorted(py.iterdir()) if path.name not in ("ansible_test", "bin")
    ]
    for collection in COLLECTIONS:
        path = collections_from / "ansible_collections" / collection
        if path.is_dir():
            found.append((path, f"collections/ansible_collections/{collection}"))
    return found


def shipped_payload(shipped: head_ansible.ShippedAnsible) -> list[tuple[Path, str]]:
    if shipped.downloaded:
        return downloaded_payload(shipped.site_packages, site_packages())
    return ansible_payload(shipped.site_packages)


def bundle(
    inventory: Inventory,
    folder: str,
    *,
    key: bytes | None,
    extravars: dict[str, Any],
    files: dict[str, bytes],
    payload: Iterable[tuple[Path, str]],
) -> bytes:
    """The one upload: playbooks, roles, ansible.cfg, the head's inventory, keys and Ansible itself."""
    head = head_inventory(inventory, folder)
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w:gz", compresslevel=1) as archive:
        add_site(archive, payload)
        header = f"# Ansible inventory of gpufleet cluster '{head.cluster}', as its head node sees it.\n"
        import yaml

        text = header + yaml.safe_dump(head.to_ansible(), sort_keys=False)
        _add_bytes(archive, "inventory.yml", text.encode(), 0o644)
        _add_bytes(archive, "extravars.json", json.dumps(extravars).encode())
        if key is not None:
            _add_bytes(archive, "id_cluster", key)
        for name, data in files.items():
            _add_bytes(archive, name, data)
    return stream.getvalue()


def add_site(archive: tarfile.TarFile, payload: Iterable[tuple[Path, str]]) -> None:
    """What runs a play on a node of the cluster, the head's relay folder and a baked node's site
    (``configure.node_site``) alike: playbooks, roles, the node files, ansible.cfg, the event callback and
    ``payload``, an ansible-core for that node's Python (``shipped_payload``)."""
    root = project_root()
    _add_tree(archive, root / "playbooks", "playbooks")
    _add_tree(archive, root / "roles", "roles")
    _add_tree(archive, NODE_FILES, NODE_FOLDER)  # the files the roles copy to the nodes (gpufleet_node_files)
    archive.add(root / "ansible.cfg", arcname="ansible.cfg")
    # The events the play's result is read from: ansible-runner's callback, printed inline.
    archive.add(HEAD_CALLBACK, arcname="callback_plugins/gpufleet_events.py")
    archive.add(runner_callback(), arcname="runner_callback/awx_display.py")
    for source, name in payload:
        _add_tree(archive, source, name)


@dataclass
class HeadOutput:
    """The head's ansible-playbook output as it streams back: each event line (``head_callback``:
    ansible-runner's ``awx_display`` events) read by ``runner.PlayEvents``, the parser of a play run from
    here; the text, less the event lines and markers, kept for the log."""

    events: PlayEvents
    text: list[str] = field(default_factory=list)

    def __call__(self, line: str) -> None:
        at = line.find(EVENT_MARK)
        if at >= 0 and self._event(line[at + len(EVENT_MARK) :]):
            line = line[:at]
            if not line:
                return
        text = _EVENT_MARKER.sub("", line)
        if text or not line:  # a line of markers only is none of the text
            self.text.append(text)

    def _event(self, data: str) -> bool:
        try:
            event = json.loads(data)
        except ValueError:
            return False
        if isinstance(event, dict):
            self.events(event)
        return isinstance(event, dict)


def runner_callback() -> Path:
    """ansible-runner's ``awx_display`` callback, as this machine's ansible-runner has it (it imports
    nothing but Ansible)."""
    found = importlib.util.find_spec("ansible_runner")
    assert found is not None and found.submodule_search_locations, "ansible-runner is a dependency"
    return Path(found.submodule_search_locations[0]) / "display_callback" / "callback" / "awx_display.py"


@dataclass(frozen=True)
class HeadProbe:
    """What the first call learnt of the head: its ``$HOME``, its python3 and its core count."""

    home: str
    python: head_ansible.HeadPython
    cores: int


def run_on_head(
    playbook: str,
    inventory: Inventory,
    reporter: Reporter,
    *,
    shell: Shell,
    key_file: Path | None,
    extravars: dict[str, Any],
    files: dict[str, Path],
    log_dir: Path,
    skip_tags: str | None = None,
    payload: Iterable[tuple[Path, str]] | None = None,
) -> PlayResult:
    """Run ``playbooks/<playbook>`` with Ansible on the controller (three calls of ``shell``: probe, ship,
    play).

    ``files`` name extra variables that are paths on this machine (the munge key): the head gets a copy in
    the relay folder and the variable points there. The head's output is kept in ``log_dir``/stdout."""
    head = inventory.controller.name
    found = probe_head(shell, head)
    payload = ansible_for_head(found, head, reporter, payload)
    folder = f"{found.home}/{RELAY_FOLDER}/{inventory.cluster}"
    variables = dict(extravars)
    uploads: dict[str, bytes] = {}
    for variable, path in files.items():
        uploads[path.name] = path.read_bytes()
        variables[variable] = f"{folder}/{path.name}"
    key = key_file.read_bytes() if key_file else None
    data = bundle(inventory, folder, key=key, extravars=variables, files=uploads, payload=payload)
    ship(shell, head, found.home, folder, data, reporter)
    forks = forks_for(found.cores, len(inventory.hosts))
    command = play_command(playbook, folder, forks, skip_tags, secrets=["id_cluster", *uploads])
    reporter.info(
        f"ansible-playbook on {head}: {len(inventory.hosts)} hosts, {forks} forks ({found.cores} cores)"
    )
    return play(shell, command, playbook, head, reporter, log_dir)


def probe_head(shell: Shell, head: str) -> HeadProbe:
    """Call 1: the head's ``$HOME``, python3 and cores; a head that does not answer, or has no python3, is
    an error that says what the probe printed."""
    rc, out = shell(f'printf "%s\\n" "$HOME" && {head_ansible.PROBE} && nproc')
    lines = out.strip().splitlines()
    try:
        python = head_ansible.HeadPython.parse(lines[-2])
        if rc != 0 or not lines[-1].strip().isdigit():
            raise ValueError(lines[-1])
    except (ValueError, IndexError):
        raise ConfigureError(
            f"cannot run Ansible on the head node {head}: the probe exited {rc}: {out.strip()[-400:]}",
            hint="check that the controller answers SSH and has python3 ('gpufleet status SPEC'), or unset "
            f"{SWITCH} to run Ansible from this machine",
        ) from None
    return HeadProbe(lines[-3], python, int(lines[-1]))


def ansible_for_head(
    found: HeadProbe, head: str, reporter: Reporter, payload: Iterable[tuple[Path, str]] | None
) -> Iterable[tuple[Path, str]]:
    """The ansible-core the head runs (``head_ansible``), as what to upload: ``payload`` when given;
    ``NoAnsibleForHead`` names the head when no release runs on its python3."""
    try:
        release = head_ansible.release_for(found.python)
        if payload is not None:
            return payload
        shipped = head_ansible.for_head(found.python)
    except NoAnsibleForHead as refused:
        raise NoAnsibleForHead(f"the head node {head}: {refused.message}", hint=refused.hint) from None
    source = "downloaded for it" if shipped.downloaded else "this machine's own"
    reporter.info(f"{head} runs python3 {found.python.text}: ansible-core {release} ({source})")
    return shipped_payload(shipped)


def ship(shell: Shell, head: str, home: str, folder: str, data: bytes, reporter: Reporter) -> None:
    """Call 2: the one upload, unpacked into a fresh relay folder (only its owner may read it)."""
    quoted = shlex.quote(folder)
    reporter.info(f"shipping playbooks, roles and Ansible to {head} ({len(data) / 1e6:.1f} MB)")
    rc, out = shell(
        f"umask 077 && rm -rf {quoted} && mkdir -p {quoted} && tar -xzf - -C {quoted}", stdin=data
    )
    if rc != 0:
        raise ConfigureError(
            f"cannot unpack the playbooks on the head node {head} (exit {rc}): {out.strip()[-400:]}",
            hint=f"check the free space in {home} on {head}, or unset {SWITCH}",
        )


def play_command(playbook: str, folder: str, forks: int, skip_tags: str | None, secrets: list[str]) -> str:
    """The shell command of call 3: ansible-playbook on the head's python3 with the shipped Ansible, the
    key copies (``secrets``, in the relay folder) removed however it ends, its exit code kept."""
    env = {
        "PYTHONPATH": f"{folder}/py",
        "ANSIBLE_CONFIG": f"{folder}/ansible.cfg",
        "ANSIBLE_ROLES_PATH": f"{folder}/roles",
        "ANSIBLE_COLLECTIONS_PATH": f"{folder}/collections",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_STDOUT_CALLBACK": "gpufleet_events",
        "ANSIBLE_CALLBACK_PLUGINS": f"{folder}/callback_plugins",
        "PYTHONUNBUFFERED": "1",  # each task's line as it happens, not in 4 KiB chunks through ssh
        "ANSIBLE_LOCAL_TEMP": f"{folder}/tmp",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": f"{folder}/cp",
    }
    argv = [
        "python3",
        "-c",
        "import sys; from ansible.cli.playbook import main; sys.argv[0] = 'ansible-playbook'; main()",
        "-i",
        f"{folder}/inventory.yml",
        "-e",
        f"@{folder}/extravars.json",
        "--forks",
        str(forks),
        *(["--skip-tags", skip_tags] if skip_tags else []),
        f"{folder}/playbooks/{playbook}",
    ]
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    removed = " ".join(shlex.quote(f"{folder}/{name}") for name in secrets)
    return f"cd {shlex.quote(folder)} && {exports} {shlex.join(argv)}; rc=$?; rm -f {removed}; exit $rc"


def play(
    shell: Shell, command: str, playbook: str, head: str, reporter: Reporter, log_dir: Path
) -> PlayResult:
    """Call 3: the play, its events streamed back and read by ``runner.PlayEvents`` into a ``PlayResult``
    (the text kept in ``log_dir``/stdout); a failed play is ``play_error`` with the failures and the
    unreachable nodes, as from here."""
    output = HeadOutput(PlayEvents(reporter))
    rc, _ = shell(command, on_line=output)
    log_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(output.text)
    (log_dir / "stdout").write_text(text + "\n", encoding="utf-8")
    events = output.events
    stats = events.stats or {}
    unreachable = sorted((stats.get("dark") or {}).keys())
    if rc != 0 or events.stats is None:
        failures = events.failures or [f"{head}: ansible-playbook exited {rc}: {text.strip()[-600:]}"]
        raise play_error(playbook, "failed on the head node", rc, failures, unreachable, str(log_dir))
    return PlayResult(
        ok=True,
        changed=sum((stats.get("changed") or {}).values()),
        changed_tasks=events.changed_tasks,
        failures=[],
        unreachable=[],
        stats=stats,
        artifacts=log_dir,
    )


def configure_on_head(
    inventory: Inventory,
    munge_key: Path,
    log_dir: Path,
    reporter: Reporter,
    *,
    baked: str | None,
    required: bool = True,
) -> PlayResult | None:
    """``gpufleet configure`` from the head: site.yml's configure phase, run on the controller. Not
    ``required`` (the switch left at auto), a head whose Python differs from this machine's gives None
    before anything is shipped, with a line saying why, and configure runs Ansible from here."""
    if not baked:
        raise ConfigureError(
            f"{SWITCH}=head runs only the configure phase of nodes from a current baked image; these nodes "
            "need the install phase, which reads downloads from this machine",
            hint="bake the image first ('gpufleet image build SPEC', then 'gpufleet up SPEC'), or unset "
            f"{SWITCH}",
        )
    key = inventory.connection.private_key_file
    try:
        return run_on_head(
            "site.yml",
            inventory,
            reporter,
            shell=SshShell(inventory),
            key_file=Path(key).expanduser() if key else None,
            extravars={},
            files={"munge_key_file": munge_key},
            log_dir=log_dir,
            skip_tags="install",
        )
    except NoAnsibleForHead as refused:
        if required:
            raise
        reporter.info(f"{refused.message}: Ansible runs from this machine instead ({SWITCH}=auto)")
        return None
