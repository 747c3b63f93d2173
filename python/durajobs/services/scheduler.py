"""The scheduler loop: fire each cron task's occurrences exactly once, across restarts and
replicas.

Every node runs it; one leads, by a lease row renewed every 10 s (TTL 30 s) through
jobs.scheduler_lead, and standbys ask at the same interval. The leader keeps watermarks in
memory, so an idle minute costs the six lease renewals whatever the number of tasks; it reads a
task only when arming it. A fire is one call (jobs.scheduler_fire) whose watermark fence makes a
repeat, or a fire by a node that lost the lead mid-round, enqueue nothing. The leader also runs
the maintenance that other parts add, once a minute, and the retention sweep once an hour.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs._values.durations import Duration, parse_duration
from durajobs.declare.cron import Task
from durajobs.declare.registry import Registry
from durajobs.runtime._asyncio import CancelWatch, cancel_and_wait
from durajobs.services.retention import Retention, RetentionSweep

log = logging.getLogger(__name__)

TICK = timedelta(seconds=1)
RENEW_EVERY = timedelta(seconds=10)
LEASE_TTL = timedelta(seconds=30)  # three renewals
MAINTENANCE_EVERY = timedelta(minutes=1)
DEFAULT_RETENTION = Retention()

Clock = Callable[[], datetime]
Maintenance = Callable[[AsyncDatabase], Awaitable[None]]


async def rollup_counters(db: AsyncDatabase) -> None:
    """Fold the per-name counters into their tiers (jobs.rollup_counters)."""
    moved = await db.run(calls.rollup_counters())
    if any(moved.values()):
        log.info("jobs.counters.rolled-up", extra={"moved": moved})


def utc_now() -> datetime:
    return datetime.now(UTC)


class Scheduler:
    """Fires the tasks of `registry` while this node leads."""

    def __init__(
        self,
        registry: Registry,
        database_url: str,
        *,
        holder: str | None = None,
        tick: Duration = TICK,
        renew_every: Duration = RENEW_EVERY,
        clock: Clock = utc_now,
        maintenance: list[Maintenance] | None = None,
        retention: Retention | None = DEFAULT_RETENTION,
    ) -> None:
        self.registry = registry
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.tick = parse_duration(tick, field="tick")
        self.renew_every = parse_duration(renew_every, field="renew_every")
        self.ttl = self.renew_every * 3
        self.clock = clock
        # the leader's own chores, asked once a minute: the counters' rollup (idempotent) and,
        # unless retention is None, the hourly purge of what outlived its window
        sweeps: list[Maintenance] = [] if retention is None else [RetentionSweep(retention)]
        self.maintenance = [rollup_counters, *sweeps, *(maintenance or [])]
        self.db = AsyncDatabase(database_url, max_size=2)
        self.leading = False
        self._lease_until = datetime.min.replace(tzinfo=UTC)
        self._next_renewal = datetime.min.replace(tzinfo=UTC)
        self._next_maintenance = datetime.min.replace(tzinfo=UTC)
        self._watermarks: dict[str, datetime] = {}
        self._running = True
        # the round in flight: a second tick_once joins it rather than dispatching beside it
        self._round: asyncio.Task[int] | None = None
        self.fired = 0

    def still_leading(self) -> bool:
        """Asked before every fire: a node whose lease ran out stops mid-round."""
        return self.leading and self.clock() < self._lease_until

    async def _renew(self, now: datetime) -> None:
        # a lease that ran out locally is over, even if the renewal is granted: another node may
        # have led and fired meanwhile, so this is a new leadership
        believed = self.leading
        was_leading = believed and now < self._lease_until
        self.leading = await self.db.run(calls.scheduler_lead(self.holder, ttl=self.ttl))
        self._lease_until = now + self.ttl if self.leading else now
        self._next_renewal = now + self.renew_every
        # demoted whichever way the lease went: run out on this node's own clock (a stall), or
        # taken by another node at the renewal; an alert on the event must fire for both
        if believed and not was_leading:
            log.warning("jobs.scheduler.demoted", extra={"holder": self.holder, "reason": "lapsed"})
        elif was_leading and not self.leading:
            log.warning("jobs.scheduler.demoted", extra={"holder": self.holder, "reason": "taken"})
        if self.leading and not was_leading:
            self._watermarks.clear()  # another node may have fired meanwhile: read them again
            log.info("jobs.scheduler.leading", extra={"holder": self.holder})

    async def tick_once(self) -> int:
        """One round: renew the lease when due, then fire what is owed. Answers fires made.

        One round at a time (J123): a call while a round is in flight joins it and answers its
        fires. Cancelling the caller that started the round cancels the round (an abandoned
        round keeps the lease); cancelling a joiner leaves the round running."""
        if self._round is not None and not self._round.done():
            return await asyncio.shield(self._round)
        self._round = asyncio.ensure_future(self._tick())
        return await self._round

    async def _tick(self) -> int:
        now = self.clock()
        # standbys ask at the renewal interval; a leader also renews the moment its lease ends
        if now >= self._next_renewal or (self.leading and now >= self._lease_until):
            await self._renew(now)
        if not self.still_leading():
            return 0
        fired = 0
        for task in self.registry.tasks():
            if not self.still_leading():
                break
            try:
                fired += await self._fire_owed(task, now)
            except Exception as failure:
                # one broken task never stops the others, nor the maintenance
                log.error(
                    "jobs.scheduler.task-failed", extra={"task": task.name, "error": str(failure)}
                )
        if self.maintenance and now >= self._next_maintenance and self.still_leading():
            self._next_maintenance = now + MAINTENANCE_EVERY
            for chore in self.maintenance:
                try:
                    await chore(self.db)
                except Exception as failure:
                    log.error("jobs.scheduler.maintenance-failed", extra={"error": str(failure)})
        self.fired += fired
        return fired

    async def _fire_owed(self, task: Task, now: datetime) -> int:
        """Fire what `task` owes at `now`; answers the fires the fence let through."""
        watermark = self._watermarks.get(task.name)
        if watermark is None:
            state = await self.db.run(calls.scheduler_arm(task.name, now))
            if state.paused:
                # it keeps its watermark and is read again each round, so a resume is seen at
                # once and what it missed is owed under its catch-up policy (J126)
                return 0
            watermark = self._watermarks[task.name] = state.watermark  # read once, even if broken
        fired = 0
        for occurrence, passed in task.due(watermark, now):
            if not self.still_leading():
                break
            answers = await self.db.run(
                calls.scheduler_fire(
                    task.name, occurrence, task.requests(occurrence), watermark=passed
                )
            )
            if not answers:
                # fenced (another node fired it) or paused since read: read the task again
                self._watermarks.pop(task.name, None)
                return fired
            watermark = self._watermarks[task.name] = passed
            fired += 1
            log.info(
                "jobs.scheduler.fired",
                extra={
                    "task": task.name,
                    "occurrence": occurrence.isoformat(),
                    "jobs": len(answers),
                },
            )
        return fired

    def stop(self) -> None:
        self._running = False

    async def drain(self, running: asyncio.Future[None], deadline: float) -> bool:
        """Stop, and give `running` (the task of run()) `deadline` seconds to finish its round
        and give the lease up. Past it the round is abandoned: cancelled, its lease kept until
        it runs out, so no standby fires beside a dispatch that may still land, and
        jobs.scheduler.drain-abandoned is logged. Answers whether it finished in time."""
        self.stop()
        done, _ = await asyncio.wait({running}, timeout=max(deadline, 0.0))
        if done:
            return True
        log.warning(
            "jobs.scheduler.drain-abandoned",
            extra={"holder": self.holder, "deadline_seconds": deadline},
        )
        await cancel_and_wait(running)
        return False

    async def run(self) -> None:
        """Tick until stop(); a round that throws is logged and the loop goes on. A clean stop
        gives the lease up so a standby takes over at once; a cancelled (abandoned) round does
        not, so no standby fires while it may still be dispatching: the lease runs out instead."""
        cancel = CancelWatch()  # the pool's waits for a connection can drop a cancel
        await self.db.open()
        try:
            while self._running:
                cancel.check()
                try:
                    await self.tick_once()
                except Exception as failure:
                    log.error("jobs.scheduler.tick-failed", extra={"error": str(failure)})
                cancel.check()
                await asyncio.sleep(self.tick.total_seconds())
            if self.leading:
                await self.db.run(calls.scheduler_resign(self.holder))
        finally:
            await self.db.close()
