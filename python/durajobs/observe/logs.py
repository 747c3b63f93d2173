"""Log lines a person and a log shipper can both read: the stable event name, then its fields."""

from __future__ import annotations

import logging
import sys

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class EventFormatter(logging.Formatter):
    """`time LEVEL event key=value ...`, the fields being the record's `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{key}={value}" for key, value in vars(record).items() if key not in _STANDARD
        )
        line = f"{self.formatTime(record)} {record.levelname:<7} {record.getMessage()}"
        return f"{line} {fields}" if fields else line


def configure(level: int = logging.INFO) -> None:
    """Send durajobs' events to stderr, one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EventFormatter())
    logger = logging.getLogger("durajobs")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
