"""The per-cluster state folder: everything gpufleet writes for a cluster lives under one folder.

``$GPUFLEET_STATE_DIR/<cluster>/`` (default ``~/.local/state/gpufleet/<cluster>``) holds:
``state.json`` (provider, the cluster's id, creation and expiry times, the phases done), ``inventory.yml``,
``ssh/`` (the cluster's own key pair and known_hosts), ``munge.key``, ``logs/`` (Ansible and validation logs)
and whatever the backend keeps (``pulumi/`` for a cloud stack's local backend, ``local/`` for the podman
backend). Validation reports go elsewhere: ``reports/<cluster>-<time>/`` in the current folder, or
``--out``. ``down`` removes the folder last, after the resources.

**The cluster's id** (``cluster_id``, ``new_cluster_id``): a cluster is more than its spec's name. Two
clusters of one name (a CI stack and a workstation's ``gpufleet up`` in one account, or a cluster made
again after a ``down``) are told apart by an id made at the first ``up`` and kept for the cluster's life:
in ``state.json`` (``"cluster_id"``), in the Pulumi stack (config ``gpufleet:clusterId``, output
``cluster_id``) and on every resource, as the tag ``gpufleet:cluster-id`` (AWS) or the label
``gpufleet-cluster-id`` (GCP) (``gpufleet.infra.tags``). The reaper destroys a stack only when the stack's
id is the expired resources' id, the leftover check and the SSH proxy skip resources of another id, and a
spec whose name is already live under another id can be refused (``tags.same_cluster``). Twelve lower-case
hex digits: a tag value and a GCP label value alike.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.errors import EnvironmentProblem, StateError, writing
from gpufleet.spec.drift import fingerprint, recordable
from gpufleet.spec.model import ClusterSpec

CLUSTER_ID_KEY = "cluster_id"
CLUSTER_ID_LENGTH = 12  # hex digits: 48 random bits, unique among the clusters of one account by far


def new_cluster_id() -> str:
    """A fresh cluster id (see the module doc): ``secrets.token_hex``, twelve lower-case hex digits."""
    return secrets.token_hex(CLUSTER_ID_LENGTH // 2)


# The record is padded to a whole block of this size (``ClusterState.save``): 4 KiB, the block of ext4 and
# XFS, and a tmpfs page on x86-64.
_BLOCK = 4096


def state_root() -> Path:
    configured = os.environ.get("GPUFLEET_STATE_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpufleet"


@dataclass
class ClusterState:
    name: str
    root: Path

    @classmethod
    def for_name(cls, name: str) -> ClusterState:
        return cls(name=name, root=state_root() / name)

    # ---- paths ----------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def inventory_file(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def private_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def public_key(self) -> Path:
        return self.ssh_dir / "id_ed25519.pub"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def munge_key(self) -> Path:
        return self.root / "munge.key"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def backend_dir(self, backend: str) -> Path:
        return self.root / backend

    # ---- the record -------------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.state_file.exists()

    def load(self) -> dict[str, Any]:
        try:
            record = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StateError(
                f"no cluster named '{self.name}' (no state at {self.root})",
                hint="run 'gpufleet up SPEC' first, or set GPUFLEET_STATE_DIR to where it was made",
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StateError(
                f"{self.state_file} is damaged: {exc}",
                hint="'gpufleet down SPEC' still removes the cluster (it finds a local one by its labels)",
            ) from None
        if not isinstance(record, dict):
            raise StateError(f"{self.state_file} is damaged: it holds {type(record).__name__}, not a record")
        return record

    def save(self, record: dict[str, Any]) -> None:
        """Write the record (a new file renamed over the old one). The file is padded with blanks to a
        whole block, which costs no space (a file takes whole blocks), so that on a full disk the record can
        still be rewritten in the blocks it holds: a phase that failed because the disk filled is recorded
        as failed, not left ``running``."""
        data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        data += b" " * (-len(data) % _BLOCK)
        tmp = self.state_file.with_suffix(".tmp")
        with writing("the cluster's state record", self.state_file):
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                tmp.write_bytes(data)
                tmp.replace(self.state_file)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._overwrite(data):
                    raise

    def _overwrite(self, data: bytes) -> bool:
        """Rewrite the record in the blocks the file holds (no new block is needed); False when the
        record has grown past them or there is no record."""
        try:
            size = self.state_file.stat().st_size
        except FileNotFoundError:
            return False
        data = data.rstrip(b" ")
        if len(data) > size:
            return False
        fd = os.open(self.state_file, os.O_WRONLY)
        try:
            os.write(fd, data + b" " * (size - len(data)))
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def update(self, **changes: Any) -> dict[str, Any]:
        record = self.load() if self.exists() else {}
        record.update(changes)
        self.save(record)
        return record

    def begin(self, spec: ClusterSpec, spec_path: Path | None) -> dict[str, Any]:
        """Create (or re-open) the record for ``spec``; the creation time and the cluster's id are kept
        across re-runs (the id is made here, at the first ``up``). The record holds the spec's content
        (``spec``, and its ``spec_sha256``): what later commands compare the spec they are given with
        (``gpufleet.lifecycle.drift``)."""
        record = self.load() if self.exists() else {}
        if record and record.get("provider") != spec.provider.kind:
            raise StateError(
                f"cluster '{self.name}' exists with provider {record.get('provider')}, not "
                f"{spec.provider.kind}",
                hint=f"run 'gpufleet down' on the old one first, or rename the cluster in {spec_path}",
            )
        now = datetime.now(UTC).replace(microsecond=0)
        created = record.get("created_at") or now.isoformat()
        expires = datetime.fromisoformat(created) + spec.lifetime.ttl
        record.update(
            name=self.name,
            provider=spec.provider.kind,
            created_at=created,
            expires_at=expires.isoformat(),
            spec_path=str(spec_path.resolve()) if spec_path else record.get("spec_path"),
            spec=recordable(spec),
            spec_sha256=fingerprint(recordable(spec)),
        )
        record.setdefault(CLUSTER_ID_KEY, new_cluster_id())
        record.setdefault("phases", {})
        self.save(record)
        return record

    def mark(self, phase: str, status: str, **details: Any) -> None:
        record = self.load()
        record.setdefault("phases", {})[phase] = {
            "status": status,
            "at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            **details,
        }
        self.save(record)

    @property
    def created_at(self) -> datetime:
        return datetime.fromisoformat(self.load()["created_at"])

    @property
    def cluster_id(self) -> str | None:
        """The cluster's id (see the module doc); None without a state, or in a record made before ids."""
        if not self.exists():
            return None
        value = self.load().get(CLUSTER_ID_KEY)
        return str(value) if value else None

    # ---- secrets ----------------------------------------------------------------------------------

    def ensure_ssh_key(self) -> Path:
        """The cluster's own SSH key pair (ed25519), made once, never leaving the state folder."""
        if self.private_key.exists():
            return self.private_key
        if shutil.which("ssh-keygen") is None:
            raise EnvironmentProblem("ssh-keygen is missing", hint="apt-get install openssh-client")
        self.ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"gpufleet-{self.name}",
                "-f",
                str(self.private_key),
            ],
            check=True,
        )
        return self.private_key

    def ensure_munge_key(self) -> Path:
        """The cluster's munge key: 1024 random bytes, mode 0400, made once."""
        if not self.munge_key.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(1024))
        return self.munge_key

    def remove(self) -> list[str]:
        """Delete the whole folder; returns what was removed (for the teardown report)."""
        if not self.root.exists():
            return []
        shutil.rmtree(self.root)
        return [f"state folder {self.root}"]
