"""Observe durajobs through its log events, as an operator's log shipper would."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def recorded(logger: str, event: str) -> Iterator[list[dict[str, Any]]]:
    """Collect each `event` that `logger` emits while the block runs, at any level, as the
    record's fields (its `extra` included)."""
    seen: list[dict[str, Any]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == event:
                seen.append(dict(vars(record)))

    target = logging.getLogger(logger)
    handler = Collect(level=logging.DEBUG)
    level = target.level
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)
    try:
        yield seen
    finally:
        target.removeHandler(handler)
        target.setLevel(level)
