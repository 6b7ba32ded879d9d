"""A node's own configure result, as ``gpufleet.node.boot_configure`` writes it: the typed reader.

The node writes one JSON document per run to ``node_facts.RESULT_FILE`` and to
``<shared filesystem>/.gpufleet/configure/<node>.json``; ``gpufleet configure`` reads every node's in one
listing (``boot_wait.listing_command``) and parses each here. A document that does not parse is itself a
finding about that node (``unreadable``), never a crash of the whole wait.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

TaskState = Literal["ok", "changed", "skipped", "failed", "ignored", "unreachable"]


class TaskStatus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    status: TaskState


class FailedTask(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(description="the task's name, or 'boot: <step>' when the play could not start")
    message: str


class NodeResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    host: str | None
    run: str = Field(description="'boot', or the run id gpufleet configure asked for")
    image: str | None = Field(description="the baked image hash the node's facts expect")
    started: float
    finished: float | None = Field(
        description="None: the run has started and not finished (the unit's ExecStartPre wrote it)"
    )
    ok: bool
    rc: int | None = Field(description="ansible-playbook's exit code; None when it did not run")
    tasks: list[TaskStatus]
    failed: FailedTask | None
    stats: dict[str, int] = Field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.finished is None

    @property
    def changed_tasks(self) -> list[str]:
        return [task.task for task in self.tasks if task.status == "changed"]


def parse(text: str) -> NodeResult | str:
    """The result, or why it cannot be read (a sentence naming what is wrong)."""
    try:
        return NodeResult.model_validate(json.loads(text))
    except ValueError as exc:  # JSONDecodeError and ValidationError are both ValueErrors
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return f"its result does not read as one: {where}: {first['msg']}"
        return f"its result is not JSON: {exc}"
