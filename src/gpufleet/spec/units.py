"""Human-friendly units used in the spec: durations (``8h``) and byte sizes (``16G``)."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_DURATION = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*$")
_BYTES = re.compile(r"^\s*(\d+)\s*([KMGTP]?)(i?B?)?\s*$", re.IGNORECASE)
_BYTE_FACTORS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
MAX_BYTES = 1 << 50  # nccl-tests takes sizes as 64-bit counts; nothing a cluster validates is near this
MAX_DAYS = 3650
MAX_SECONDS = MAX_DAYS * 86400  # far below timedelta's own limit (999999999 days)


def parse_duration(value: object) -> timedelta:
    """``"90m"``, ``"8h"``, ``"2d"``, ``"1d12h"`` or a number of seconds -> timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90m, 8h or 2d")
    seconds: float | None = None
    if isinstance(value, int | float):
        seconds = float(value) if not abs(value) > MAX_SECONDS * 2 else float("inf")  # nan stays nan
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match and any(match.groups()):
            days, hours, minutes = (int(g) if g else 0 for g in match.groups())
            seconds = float(days * 86400 + hours * 3600 + minutes * 60)
    if seconds is None:
        raise ValueError("expected a duration such as 90m, 8h, 2d or 1d12h")
    if math.isnan(seconds) or seconds < 0:
        raise ValueError("a duration must be a positive time such as 90m, 8h or 2d")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{value} is far too long a duration; the longest gpufleet takes is {MAX_DAYS}d")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    minutes = int(value.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    return "".join(parts) or "0m"


def parse_bytes(value: object) -> int:
    """``8``, ``"64K"``, ``"16M"``, ``"1G"``, ``"16GiB"`` -> bytes (binary multiples, as nccl-tests)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 8, 64K, 16M or 1G")
    size: int | None = None
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _BYTES.match(value)
        if match:
            size = int(match.group(1)) * _BYTE_FACTORS[match.group(2).upper()]
    if size is None:
        raise ValueError("expected a size such as 8, 64K, 16M or 1G")
    if size < 0:
        raise ValueError("a size cannot be negative")
    if size > MAX_BYTES:
        raise ValueError(f"{value} is too large a size; the largest gpufleet takes is 1P")
    return size


def format_bytes(value: int) -> str:
    for suffix in ("T", "G", "M", "K"):
        factor = _BYTE_FACTORS[suffix]
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def about_bytes(value: int) -> str:
    """A size rounded for a message: ``1.6 GiB``, ``512 KiB``, ``37 bytes`` (binary multiples)."""
    for suffix in ("P", "T", "G", "M", "K"):
        factor = 1 << (10 * ("KMGTP".index(suffix) + 1))
        if value >= factor:
            shown = f"{value / factor:.1f}".removesuffix(".0")
            return f"{shown} {suffix}iB"
    return f"{value} bytes"


Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration)]
ByteSize = Annotated[int, BeforeValidator(parse_bytes), PlainSerializer(format_bytes)]
