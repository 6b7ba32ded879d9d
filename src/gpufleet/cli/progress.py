"""A rich implementation of gpufleet.progress.Reporter: a spinner per step, its time when it ends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.status import Status


class RichReporter:
    def __init__(self, console: Console, *, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self._status: Status | None = None
        self._title = ""

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        start = time.monotonic()
        self._title = title
        with self.console.status(f"{escape(title)} ...") as status:
            self._status = status
            try:
                yield
            except BaseException:
                self.console.print(f"[red]x[/] {escape(title)} [dim]({time.monotonic() - start:.1f} s)[/]")
                raise
            finally:
                self._status = None
        self.console.print(f"[green]✓[/] {escape(title)} [dim]({time.monotonic() - start:.1f} s)[/]")

    def info(self, message: str) -> None:
        if self._status is not None:
            self._status.update(f"{escape(self._title)} ... [dim]{escape(message.strip())}[/]")
        if self.verbose or self._status is None:
            self.console.print(f"  [dim]{escape(message)}[/]")
