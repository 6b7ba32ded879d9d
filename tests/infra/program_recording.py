"""What the GCP and Azure recording fixtures share: a program that raises fails the test that did not expect
it, with the program's own exception, and a program that finishes fails the test that expected it to raise
(a recording keeps the exception next to what was registered; reading ``error`` is no longer up to each
test)."""

from __future__ import annotations

from typing import Protocol, TypeVar

import pytest


class _Recorded(Protocol):
    @property
    def error(self) -> BaseException | None: ...


R = TypeVar("R", bound=_Recorded)


def expect(recording: R, raises: bool) -> R:
    """``recording`` when the program raised exactly when the test expects it to."""
    if recording.error is not None and not raises:
        raise recording.error
    if recording.error is None and raises:
        pytest.fail("the program was expected to raise and finished")
    return recording
