"""Durations as users write them ('50ms', '3d', 30, timedelta), checked where they are declared.

A zero, negative, NaN or infinite duration is refused: a ceiling of 0 read as "no ceiling" is the
opposite of what its author wrote.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from durajobs.errors import DeclarationInvalid

Duration = timedelta | int | float | str

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")


def parse_duration(value: Duration, *, field: str) -> timedelta:
    """Return `value` as a positive, finite timedelta; numbers are seconds.

    Raises X_JOB_DECLARATION_INVALID naming `field` for anything else.
    """
    if isinstance(value, bool):
        raise DeclarationInvalid(
            f"{field} must be a duration, got {value!r}", detail={"field": field}
        )
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise DeclarationInvalid(
                f"{field} must be finite, got {value!r}", detail={"field": field}
            )
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise DeclarationInvalid(
                f"{field} must look like '50ms', '30s', '5m', '2h' or '3d', got {value!r}",
                detail={"field": field},
            )
        result = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise DeclarationInvalid(
            f"{field} must be a duration, got {value!r}", detail={"field": field}
        )
    if result <= timedelta(0):
        raise DeclarationInvalid(
            f"{field} must be positive, got {value!r}", detail={"field": field}
        )
    return result


def positive_count(value: object, *, field: str, most: int | None = None) -> int:
    """Return `value` as a whole number from 1 to `most` (no bound when None), or raise
    X_JOB_DECLARATION_INVALID."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DeclarationInvalid(
            f"{field} must be a whole number, got {value!r}", detail={"field": field}
        )
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise DeclarationInvalid(
            f"{field} must be a whole number of at least 1, got {value!r}", detail={"field": field}
        )
    if most is not None and value > most:
        raise DeclarationInvalid(
            f"{field} must be at most {most}, got {value!r}", detail={"field": field}
        )
    return int(value)
