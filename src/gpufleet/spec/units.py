"""Human-friendly units used in the spec: durations (``8h``) and byte sizes (``16G``)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

_DURATION = re.compile(r"^\s*(?:(\d+)d)?\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*$")
_BYTES = re.compile(r"^\s*(\d+)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)
_BYTE_FACTORS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_duration(value: object) -> timedelta:
    """``"90m"``, ``"8h"``, ``"2d"``, ``"1d12h"`` or a number of seconds -> timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90m, 8h or 2d")
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match and any(match.groups()):
            days, hours, minutes = (int(g) if g else 0 for g in match.groups())
            return timedelta(days=days, hours=hours, minutes=minutes)
    raise ValueError("expected a duration such as 90m, 8h, 2d or 1d12h")


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
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = _BYTES.match(value)
        if match:
            return int(match.group(1)) * _BYTE_FACTORS[match.group(2).upper()]
    raise ValueError("expected a size such as 8, 64K, 16M or 1G")


def format_bytes(value: int) -> str:
    for suffix in ("T", "G", "M", "K"):
        factor = _BYTE_FACTORS[suffix]
        if value >= factor and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(format_duration)]
ByteSize = Annotated[int, BeforeValidator(parse_bytes), PlainSerializer(format_bytes)]
