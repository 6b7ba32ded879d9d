"""Run the project's playbooks against a cluster's inventory through ansible-runner, showing progress.

The same playbooks serve every backend; only the inventory differs. A run's artifacts (events, stdout)
go to ``<state>/logs/ansible``; tasks marked ``no_log`` keep their secrets out of them.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.errors import ConfigureError, EnvironmentProblem
from gpufleet.paths import project_root
from gpufleet.progress import Reporter


@dataclass
class PlayResult:
    ok: bool
    changed: int
    changed_tasks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    artifacts: Path | None = None
    install_phase: str = "ran"  # or "skipped: baked image <hash>" (nodes from a current baked image)


class PlayEvents:
    """Reads a play's ansible-runner job events (``awx_display``'s): reporter lines, the failures and the
    changed tasks, and the stats of its ``playbook_on_stats`` event (ansible-runner's ``Runner.stats``
    keys). The one reader of Ansible's output: a play run here through ansible-runner, and one run on the
    head node (``relay``), whose events the same callback makes (``head_callback``)."""

    STATS = ("skipped", "ok", "dark", "failures", "ignored", "rescued", "processed", "changed")

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.failures: list[str] = []
        self.changed_tasks: list[str] = []
        self.play = ""
        self.stats: dict[str, Any] | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            self.reporter.info(f"play: {self.play}")
        elif kind == "playbook_on_task_start":
            self.reporter.info(f"  task: {data.get('task', '')}")
        elif kind == "runner_on_ok" and data.get("res", {}).get("changed"):
            self.changed_tasks.append(f"{data.get('host')}: {data.get('task')}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            result = data.get("res", {})
            message = result.get("msg") or result.get("stderr") or result.get("module_stderr") or "failed"
            stderr = str(result.get("stderr") or "").strip()
            if stderr and stderr not in str(message):  # a command's "non-zero return code": say its words
                message = f"{message}: {stderr}"
            if result.get("_ansible_no_log"):
                message = "(output hidden: the task handles a secret)"
            self.failures.append(f"{data.get('host')}: {data.get('task')}: {str(message).strip()[:1500]}")
        elif kind == "runner_on_unreachable":
            result = data.get("res", {})
            self.failures.append(
                f"{data.get('host')}: unreachable: {str(result.get('msg', '')).strip()[:500]}"
            )
        elif kind == "playbook_on_stats":
            self.stats = {key: data.get(key, {}) for key in self.STATS}
        return True


def run_playbook(
    playbook: str,
    inventory: Path,
    artifacts_dir: Path,
    reporter: Reporter,
    *,
    extravars: dict[str, Any] | None = None,
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
) -> PlayResult:
    """Run ``playbooks/<playbook>``; ``tags`` / ``skip_tags`` select role phases (install, configure)."""
    import ansible_runner

    root = project_root()
    playbook_path = root / "playbooks" / playbook
    if not playbook_path.exists():
        raise ConfigureError(f"playbook {playbook_path} does not exist")
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    progress = PlayEvents(reporter)
    binary = Path(sys.executable).parent / "ansible-playbook"
    if not binary.exists():
        found = shutil.which("ansible-playbook")
        if found is None:
            raise EnvironmentProblem(
                "ansible-playbook is not installed", hint="pip install -e . (ansible comes with gpufleet)"
            )
        binary = Path(found)
    # ansible-runner looks ansible-playbook up on this process's PATH: put the one beside us first.
    if str(binary.parent) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    envvars = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(root / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    runner = ansible_runner.run(
        private_data_dir=str(artifacts_dir),
        project_dir=str(root),
        playbook=str(playbook_path),
        inventory=str(inventory),
        extravars=extravars or {},
        envvars=envvars,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        event_handler=progress,
        quiet=True,
        rotate_artifacts=3,
        suppress_env_files=True,
        # Without a callback ansible-runner installs its own SIGINT/SIGTERM handlers and turns a signal
        # into a 'canceled' run; gpufleet's handler (gpufleet.lifecycle.signals) stops the play itself.
        cancel_callback=lambda: False,
    )
    stats = runner.stats or {}
    unreachable = sorted((stats.get("dark") or {}).keys())
    changed = sum((stats.get("changed") or {}).values())
    ok = runner.status == "successful" and runner.rc == 0
    result = PlayResult(
        ok=ok,
        changed=changed,
        changed_tasks=progress.changed_tasks,
        failures=progress.failures,
        unreachable=unreachable,
        stats=stats,
        artifacts=Path(runner.config.artifact_dir),
    )
    if not ok:
        raise play_error(
            playbook, runner.status, runner.rc, progress.failures, unreachable, runner.config.artifact_dir
        )
    return result


def play_error(
    playbook: str, status: str, rc: int, failures: list[str], unreachable: list[str], artifacts: str
) -> ConfigureError:
    """The error of a failed play; nodes that became unreachable (stopped, killed, cut off) are named first,
    with how to bring them back."""
    details = "\n".join(f"  - {line}" for line in failures[:20]) or f"  ansible-runner: {status}"
    log = f"the full log is in {artifacts}/stdout"
    if not unreachable:
        return ConfigureError(
            f"{playbook} failed (status {status}, exit {rc}):\n{details}",
            hint=f"{log}; fix the cause and re-run 'gpufleet configure' (it is safe to re-run)",
        )
    nodes = ", ".join(unreachable)
    return ConfigureError(
        f"{playbook} failed (status {status}, exit {rc}): {nodes} became unreachable "
        f"(stopped, killed or cut off from this machine) while it ran:\n{details}",
        hint=f"bring {nodes} back: 'gpufleet up SPEC' starts a stopped node of a local cluster again (and is "
        "safe to re-run on every provider); on a cloud or bare-metal node check that it runs and answers "
        f"SSH; then re-run 'gpufleet configure SPEC' ({log})",
    )
