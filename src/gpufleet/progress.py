"""Progress reporting for long steps, independent of the CLI.

Stages call ``reporter.step("building node image")`` as a context manager and ``reporter.info(...)`` for a
line of detail. The CLI passes a rich implementation (spinner, elapsed time); tests and library users get
``SilentReporter`` or a ``RecordingReporter``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Reporter(Protocol):
    def step(self, title: str) -> AbstractContextManager[None]: ...

    def info(self, message: str) -> None: ...


class SilentReporter:
    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        yield

    def info(self, message: str) -> None:
        return None


class RecordingReporter:
    """Keeps (title, seconds, ok) per step; used by tests and the benchmark scripts."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float, bool]] = []
        self.lines: list[str] = []

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        start = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.steps.append((title, time.monotonic() - start, ok))

    def info(self, message: str) -> None:
        self.lines.append(message)

    def seconds(self, prefix: str) -> float:
        return sum(seconds for title, seconds, _ in self.steps if title.startswith(prefix))
