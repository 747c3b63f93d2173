"""Retention: how long finished jobs, published outbox rows and expired events are kept, and the
sweep that deletes what outlived its window through `jobs.purge`, a bounded batch a call.

The scheduler's leader runs the sweep once an hour (`Scheduler(retention=...)`, on by default);
`durajobs jobs purge` and `Client.purge` run it on demand.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from durajobs._db import calls
from durajobs._values.counts import parse_count
from durajobs._values.durations import Duration, parse_duration
from durajobs._values.records import PurgeResult

if TYPE_CHECKING:
    from durajobs._db.database import AsyncDatabase

log = logging.getLogger(__name__)

DONE_AFTER = timedelta(days=14)
ENDED_AFTER = timedelta(days=90)
PUBLISHED_AFTER = timedelta(days=7)
BATCH_SIZE = 1000
MOST_BATCH_SIZE = 10000  # as jobs.purge checks it
MAX_BATCHES = 10
SWEEP_EVERY = timedelta(hours=1)

NOTHING = PurgeResult(0, 0, 0, 0)


@dataclass(frozen=True)
class Retention:
    """The windows, counted from when a row finished (a job), was published (an outbox row);
    an event goes at its own expiry. A sweep makes at most `max_batches` calls of `batch_size`,
    once per `every`; one that stopped with more left goes on at the scheduler's next minute."""

    done_after: timedelta = DONE_AFTER
    ended_after: timedelta = ENDED_AFTER  # failed, dead and cancelled jobs
    published_after: timedelta = PUBLISHED_AFTER
    batch_size: int = BATCH_SIZE
    max_batches: int = MAX_BATCHES
    every: timedelta = SWEEP_EVERY

    @classmethod
    def of(
        cls,
        *,
        done_after: Duration = DONE_AFTER,
        ended_after: Duration = ENDED_AFTER,
        published_after: Duration = PUBLISHED_AFTER,
        batch_size: int = BATCH_SIZE,
        max_batches: int = MAX_BATCHES,
        every: Duration = SWEEP_EVERY,
    ) -> Retention:
        """Check and build: durations as '14d', '12h', seconds or timedelta."""
        return cls(
            done_after=parse_duration(done_after, field="done_after"),
            ended_after=parse_duration(ended_after, field="ended_after"),
            published_after=parse_duration(published_after, field="published_after"),
            batch_size=parse_count(batch_size, field="batch_size", most=MOST_BATCH_SIZE),
            max_batches=parse_count(max_batches, field="max_batches"),
            every=parse_duration(every, field="every"),
        )

    def call(self) -> calls.Call[PurgeResult]:
        return calls.purge(
            done_after=self.done_after,
            ended_after=self.ended_after,
            published_after=self.published_after,
            batch_size=self.batch_size,
        )

    def more_after(self, answer: PurgeResult) -> bool:
        """Whether a call that answered `answer` may have left more: a window filled its batch."""
        return max(answer.jobs, answer.outbox, answer.events) >= self.batch_size


@dataclass(frozen=True)
class Swept:
    """What a sweep deleted, in how many calls, and whether it stopped at `max_batches` with a
    full last batch (more is left for the next sweep)."""

    deleted: PurgeResult
    calls: int
    behind: bool


async def sweep(db: AsyncDatabase, retention: Retention) -> Swept:
    """Call jobs.purge until a call leaves nothing more, or `max_batches` calls were made."""
    total, made, more = NOTHING, 0, True
    while more and made < retention.max_batches:
        answer = await db.run(retention.call())
        total, made, more = total + answer, made + 1, retention.more_after(answer)
    return Swept(total, made, more)


class RetentionSweep:
    """The scheduler leader's chore, asked once a minute: a sweep once per `retention.every`, the
    first at once, and again at the next minute while one stops with more left. A round stays
    short (the leader fires cron tasks in the same loop) and a backlog is still worked off."""

    def __init__(self, retention: Retention) -> None:
        self.retention = retention
        self._next = -float("inf")  # time.monotonic() of the next sweep

    async def __call__(self, db: AsyncDatabase) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.retention.every.total_seconds()
        swept = await sweep(db, self.retention)
        if swept.behind:
            self._next = now  # the rest at the next round
        deleted = swept.deleted
        if deleted.deleted:
            log.info(
                "jobs.retention.purged",
                extra={
                    "jobs": deleted.jobs,
                    "steps": deleted.steps,
                    "outbox": deleted.outbox,
                    "events": deleted.events,
                    "calls": swept.calls,
                    "behind": swept.behind,
                },
            )
