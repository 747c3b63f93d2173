"""`ctx.progress(done, total, note)`: how far a run has got, written at most once a second.

A body may report on every turn of its loop; the row takes one write a second per run (the
latest value wins) plus the last report, flushed before the attempt settles. Writes are fenced
on the claim in SQL, so a body whose lease lapsed reports nothing on the attempt that replaced
it. A write that fails is logged and dropped: progress is a hint, never a reason to fail a job.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol, TypeVar

from durajobs._db import calls
from durajobs._values.records import ClaimedJob
from durajobs.errors import ArgumentInvalid

T = TypeVar("T")


class Database(Protocol):
    async def run(self, call: calls.Call[T]) -> T: ...


log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 1.0  # seconds between writes of one run
MAX_NOTE = 1000


@dataclass(frozen=True, slots=True)
class Progress:
    done: float
    total: float | None
    note: str | None


def _number(value: object, field: str, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ArgumentInvalid(
            f"progress {field} must be a finite number of at least 0, got {value!r}",
            detail={"function": "progress", "argument": field},
        )
    return float(value) if isinstance(value, float) else value


def checked(done: object, total: object = None, note: object = None) -> Progress:
    """Refuse a report the SQL would refuse, in the body, where the mistake is."""
    checked_done = _number(done, "done", optional=False)
    assert checked_done is not None
    if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE):
        raise ArgumentInvalid(
            f"progress note must be text of at most {MAX_NOTE} characters",
            detail={"function": "progress", "argument": "note"},
        )
    return Progress(checked_done, _number(total, "total", optional=True), note)


class ProgressReporter:
    """Throttles one attempt's reports to the database; safe to call from the body's thread."""

    def __init__(
        self,
        db: Database,
        claimed: ClaimedJob,
        loop: asyncio.AbstractEventLoop,
        *,
        interval: float = PROGRESS_INTERVAL,
    ) -> None:
        self._db = db
        self._claimed = claimed
        self._loop = loop
        self._interval = interval
        self._pending: Progress | None = None
        self._last_write = -math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._closed = False
        self.writes = 0  # landed or not, for tests and operators

    def report(self, done: object, total: object = None, note: object = None) -> None:
        """Record a report; it reaches the row now, or within a second, or at the settle."""
        progress = checked(done, total, note)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._accept(progress)
        else:
            self._loop.call_soon_threadsafe(self._accept, progress)

    def _accept(self, progress: Progress) -> None:
        if self._closed:
            return
        self._pending = progress
        if self._timer is not None or self._writing is not None:
            return  # a write is armed or on the wire: it takes the latest value
        wait = self._last_write + self._interval - time.monotonic()
        if wait <= 0:
            self._start_write()
        else:
            self._timer = self._loop.call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._pending is not None and not self._closed:
            self._start_write()

    def _start_write(self) -> None:
        self._writing = self._loop.create_task(self._write())

    async def _write(self) -> None:
        progress, self._pending = self._pending, None
        try:
            if progress is not None:
                self._last_write = time.monotonic()
                self.writes += 1
                await self._db.run(
                    calls.progress(
                        self._claimed.fence, progress.done, progress.total, progress.note
                    )
                )
        except Exception as failure:
            log.warning(
                "jobs.progress.failed", extra={"id": str(self._claimed.id), "error": str(failure)}
            )
        finally:
            self._writing = None
        if self._pending is not None and not self._closed and self._timer is None:
            wait = max(self._last_write + self._interval - time.monotonic(), 0)
            self._timer = self._loop.call_later(wait, self._on_timer)

    @property
    def idle(self) -> bool:
        """Nothing to write: no report pending, armed or on the wire."""
        return self._pending is None and self._timer is None and self._writing is None

    def close(self) -> None:
        """Take no more reports and drop any not yet written (the attempt lost the row)."""
        self._closed = True
        self._pending = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def flush(self) -> None:
        """Before the settle: write the last report now, and take no more."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)
        if self._pending is not None:
            await self._write()
