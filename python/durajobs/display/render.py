"""What the operator commands print: aligned tables, `key: value` lines and JSON documents.

Nothing here talks to the database; every function turns values already read into text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any
from uuid import UUID

NOTHING = "-"  # what an empty cell shows, so columns stay readable


def plain(value: Any) -> Any:
    """`value` as JSON can hold it: ids and enums as strings, instants as ISO 8601 with their
    zone, intervals as seconds, dataclasses as objects."""
    if isinstance(value, Enum):
        return plain(value.value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if is_dataclass(value) and not isinstance(value, type):
        return plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def dumps(document: Any) -> str:
    """One JSON document, keys in the order the command built them."""
    return json.dumps(plain(document))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, no trailing blanks."""
    widths = [len(header) for header in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    return "\n".join(line(cells).rstrip() for cells in [headers, *rows])


def fields(pairs: Sequence[tuple[str, str]]) -> str:
    """`key: value` lines with the values aligned."""
    width = max((len(key) for key, _ in pairs), default=0) + 1
    return "\n".join(f"{key + ':':<{width}} {value}".rstrip() for key, value in pairs)


def when(value: datetime | str | None) -> str:
    """An instant in UTC to the second; `inspect_job` hands them over as ISO strings."""
    if value is None:
        return NOTHING
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(sep=" ", timespec="seconds")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return value
    return parsed.astimezone(UTC).isoformat(sep=" ", timespec="seconds")


def span(seconds: float | None) -> str:
    """A duration as a person reads it: 250ms, 2.5s, 4m 10s, 3h 5m."""
    if seconds is None:
        return NOTHING
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}".removesuffix(".0") + "s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {rest}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m"


def text(value: Any) -> str:
    """A cell: NOTHING for None, lists joined by commas, everything else as str."""
    if value is None:
        return NOTHING
    if isinstance(value, list | tuple):
        return ",".join(text(item) for item in value) or NOTHING
    return str(value)


def clip(value: str, limit: int = 60) -> str:
    """One line of at most `limit` characters, so one long error cannot widen a whole table."""
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
