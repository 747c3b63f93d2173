"""A vacuum of the hot table when its dead row versions slow the claim.

Every job leaves two dead row versions in jobs.jobs_live (its claim and its end) and a dead
entry at the front of jobs_claim_idx, where every claim starts reading. Until a vacuum removes
them, a claim steps over them all: after 200,000 jobs, an empty claim read 1,581 index pages and
took 6.7 ms against 0.05 ms after a vacuum (268 ms). Autovacuum gets there, but only once a
naptime (a minute by default), whatever the table's storage parameters ask.

So the worker looks when its queues run dry (a claim answered fewer rows than it asked for),
at most once every `interval`: on a connection of its own, in the background, it reads the
table's dead tuples from the statistics, and past `dead_tuples` it vacuums jobs.jobs_live, one
worker at a time across the fleet (a session advisory lock the others skip). A claim's own
time is no sign: a session's first claims plan their statements and are slow on any table. A
role that does not own the table gets a warning from Postgres instead of a vacuum: the worker
logs it once and stops asking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg

from durajobs.runtime._asyncio import Spawn, cancel_and_wait, spawn_loose

log = logging.getLogger(__name__)

# about 400 leaf pages of dead claim-index entries: a millisecond or two on every claim
DEAD_TUPLES = 50_000
INTERVAL = 30.0  # seconds between two looks by one worker
# one vacuum of the hot table at a time, fleet-wide
LOCK = "select pg_try_advisory_lock(hashtext('durajobs.vacuum_hot_table'))"
DEAD = "select n_dead_tup from pg_stat_user_tables where relid = 'jobs.jobs_live'::regclass"


class HotTableUpkeep:
    """Decides from the claims when to look at jobs.jobs_live, and vacuums it when it must."""

    def __init__(
        self,
        database_url: str,
        *,
        dead_tuples: int = DEAD_TUPLES,
        interval: float = INTERVAL,
        enabled: bool = True,
    ) -> None:
        self._database_url = database_url
        self.dead_tuples = dead_tuples
        self._interval = interval
        self.enabled = enabled
        self._last: float | None = None  # time.monotonic() of the last look
        self._task: asyncio.Task[None] | None = None
        self.spawn: Spawn = spawn_loose  # the worker's supervisor once it runs
        self.vacuums = 0  # vacuums this worker ran to the end

    def observe(self, asked: int, got: int) -> None:
        """One claim's answer: `got` of `asked` rows."""
        if not self.enabled or got >= asked:
            return
        if self._task is not None and not self._task.done():
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < self._interval:
            return
        self._last = now
        self._task = self.spawn("upkeep", self._look())

    async def close(self) -> None:
        """Cut a look or a vacuum in flight: the worker is stopping."""
        if self._task is not None:
            # not one cancel: psycopg's connect can drop it
            await cancel_and_wait(self._task)

    async def _look(self) -> None:
        refused: list[str] = []
        busy: list[str] = []

        def on_notice(notice: psycopg.errors.Diagnostic) -> None:
            # a role that does not own the table: Postgres warns and skips it ("only table or
            # database owner can vacuum it" in 15, "permission denied to vacuum" from 16 on)
            message = notice.message_primary or ""
            if "owner can vacuum" in message or "permission denied" in message:
                refused.append(message)
            elif "lock not available" in message:
                busy.append(message)  # an autovacuum is at it already: skip_locked skipped

        began = time.monotonic()
        try:
            connection: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                self._database_url, autocommit=True
            )
            async with connection:
                row = await (await connection.execute(DEAD)).fetchone()
                dead = int(row[0]) if row is not None and row[0] is not None else 0
                if dead < self.dead_tuples:
                    return
                locked = await (await connection.execute(LOCK)).fetchone()
                if locked is None or not locked[0]:
                    return  # another worker vacuums now
                connection.add_notice_handler(on_notice)
                # never truncate: its ACCESS EXCLUSIVE lock would stop every claim and ack
                await connection.execute("vacuum (skip_locked, truncate false) jobs.jobs_live")
        except asyncio.CancelledError:
            raise
        except Exception as failure:
            log.warning("jobs.worker.vacuum-failed", extra={"error": repr(failure)})
            return
        if refused:
            self.enabled = False
            log.warning(
                "jobs.worker.vacuum-refused",
                extra={
                    "reason": refused[0],
                    "fix": "let the table's owner run the worker, or set autovacuum_naptime "
                    "lower (docs/operations.md, table health)",
                },
            )
            return
        if busy:
            return
        self.vacuums += 1
        log.info(
            "jobs.worker.vacuumed",
            extra={
                "table": "jobs.jobs_live",
                "dead_tuples": dead,
                "vacuum_ms": round((time.monotonic() - began) * 1000, 1),
            },
        )
