"""The outbox relay: moves staged jobs from an application's database to the queue's.

A pass claims a batch under a lease (stamped in the locking statement), publishes each row in
staging order with jobs.enqueue under the row's own id and run id, then marks the
published rows. A publish that fails stops the batch, so a later row never overtakes an earlier
one, and hands the rest back at once; so does a pass that has spent most of its lease (the mark
must land while the lease holds). Inputs pass through as the JSON text the outbox holds, so
jsonb's exact numbers stay exact. A crash between publish and mark re-publishes later and
meets the job the first publish made (by-id dedupe): the handler still runs once.
Where the outbox and the queue share one database, a pass is one call (jobs.outbox_relay).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from datetime import timedelta

from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs._values.durations import Duration, parse_duration
from durajobs.errors import Invariant
from durajobs.runtime._asyncio import CancelWatch, cancel_and_wait
from durajobs.runtime.wake import QueueWake

log = logging.getLogger(__name__)

RELAY_INTERVAL = timedelta(milliseconds=200)
IDLE_CEILING = timedelta(seconds=2)
WOKEN_IDLE_CEILING = timedelta(seconds=5)
# the share of a claim's lease a pass spends publishing before it marks what it published
LEASE_SHARE = 0.6
DEFAULT_CLAIM_LEASE = timedelta(seconds=30)
DEFAULT_BATCH = 100
# how often a stopping relay looks again at its deadline while the pass in flight finishes
STOP_STEP = 0.05  # seconds


def _claim_lease(value: Duration) -> timedelta:
    """A positive, finite, whole number of milliseconds, or X_INVARIANT: 0 would expire before
    the claim returns, a fraction means something else in Python than in SQL, infinity strands
    a dead relay's rows forever."""
    try:
        lease = parse_duration(value, field="claim_lease")
    except ValueError as invalid:
        raise Invariant(f"claim_lease: {invalid}", detail={"field": "claim_lease"}) from None
    if lease % timedelta(milliseconds=1) or lease > timedelta(days=1):
        raise Invariant(
            f"claim_lease must be whole milliseconds, at most a day, got {value!r}",
            detail={"field": "claim_lease"},
        )
    return lease


class OutboxRelay:
    """Publishes the outbox of `source_url` into the queue at `target_url` (same when None)."""

    def __init__(
        self,
        source_url: str,
        target_url: str | None = None,
        *,
        relay_id: str | None = None,
        batch_size: int = DEFAULT_BATCH,
        interval: Duration = RELAY_INTERVAL,
        idle_ceiling: Duration = IDLE_CEILING,
        claim_lease: Duration = DEFAULT_CLAIM_LEASE,
        listen: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise Invariant(
                f"batch_size must be at least 1, got {batch_size!r}", detail={"field": "batch_size"}
            )
        self.relay_id = (
            relay_id or f"relay:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        )
        self.batch_size = batch_size
        self.interval = parse_duration(interval, field="interval")
        self.idle_ceiling = parse_duration(idle_ceiling, field="idle_ceiling")
        self.claim_lease = _claim_lease(claim_lease)
        self.source = AsyncDatabase(source_url, max_size=2)
        self.same_database = target_url is None or target_url == source_url
        self.target = (
            self.source if self.same_database else AsyncDatabase(target_url or "", max_size=2)
        )
        self._listen = listen
        self._wake: QueueWake | None = None
        self._kick = asyncio.Event()
        self._running = True
        self._pass: asyncio.Task[int] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._stop_by: float | None = None  # stop(deadline): when run() abandons the pass
        self._stop_requested = asyncio.Event()
        self.published = 0

    def kick(self, _payload: str | None = None) -> None:
        self._kick.set()

    def stop(self, deadline: Duration | None = None) -> None:
        """Stop after the pass in flight: run() joins it, so no publish is left unmarked. With a
        `deadline` (counted from this call) run() waits for the pass that long at most, then
        abandons it (its rows come back when their claim lapses; a re-publish dedupes). Called
        again, the earliest deadline wins, whenever it was given."""
        self._running = False
        self._stop_requested.set()
        if deadline is not None:
            by = time.monotonic() + parse_duration(deadline, field="deadline").total_seconds()
            self._stop_by = by if self._stop_by is None else min(self._stop_by, by)
        self._kick.set()

    async def open(self) -> None:
        await self.source.open()
        if not self.same_database:
            try:
                await self.target.open()
            except BaseException:
                await self.source.close()  # or a refused target leaves the source's pool open
                raise

    async def close(self) -> None:
        if self._wake is not None:
            await self._wake.stop()
        await self.source.close()
        if not self.same_database:
            await self.target.close()

    async def run(self) -> None:
        """Relay until stop(); a pass that throws is logged and the loop re-arms."""
        cancel = CancelWatch()  # opening waits on the pools, which can drop a cancel
        await self.open()
        try:
            if self._listen:
                self._wake = QueueWake(
                    self.source.database_url,
                    None,
                    self.kick,
                    lambda token: self.source.run(
                        calls.wake_probe(token, calls.OUTBOX_WAKE_CHANNEL)
                    ),
                    channel=calls.OUTBOX_WAKE_CHANNEL,
                )
                self._wake.start()
            wait = self.interval
            while self._running:
                cancel.check()
                self._kick.clear()
                self._pass = asyncio.ensure_future(self.run_once())
                # the pass, or a stop: then _finish joins the pass (within stop's deadline)
                stopping = asyncio.ensure_future(self._stop_requested.wait())
                try:
                    await asyncio.wait({self._pass, stopping}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopping.cancel()
                if not self._pass.done():
                    break
                try:
                    moved = self._pass.result()
                except Exception as failure:
                    log.error(
                        "jobs.outbox.tick-failed",
                        extra={"relay": self.relay_id, "error": str(failure)},
                    )
                    moved = 0
                if not self._running:
                    break
                if moved >= self.batch_size:
                    wait = self.interval
                    continue
                proven = self._wake is not None and self._wake.proven
                ceiling = WOKEN_IDLE_CEILING if proven else self.idle_ceiling
                if not moved:
                    log.debug(
                        "jobs.outbox.idle",
                        extra={"relay": self.relay_id, "wait": wait.total_seconds()},
                    )
                try:
                    async with asyncio.timeout(wait.total_seconds()):  # not wait_for (wake.py)
                        await self._kick.wait()
                    wait = self.interval
                except TimeoutError:
                    wait = self.interval if moved else min(wait * 2, ceiling)
        finally:
            # shielded: a second cancel returns at once, but the pass in flight still finishes
            # publishing and marking its batch, and the pools close after it
            self._closing = asyncio.ensure_future(self._finish())
            await asyncio.shield(self._closing)

    async def _finish(self) -> None:
        try:
            running = self._pass
            # in short steps: a later stop() may bring the deadline forward
            while running is not None and not running.done():
                step = STOP_STEP
                if self._stop_by is not None:
                    step = min(step, self._stop_by - time.monotonic())
                    if step <= 0:
                        log.warning("jobs.outbox.stop-abandoned", extra={"relay": self.relay_id})
                        await cancel_and_wait(running)
                        break
                await asyncio.wait({running}, timeout=step)
        finally:
            await self.close()

    async def run_once(self) -> int:
        """One pass: answer how many rows it published."""
        if self.same_database:
            results = await self.source.run(
                calls.outbox_relay(self.relay_id, batch_size=self.batch_size)
            )
            self.published += len(results)
            return len(results)
        # the mark lands only while the lease holds: a pass that published past it would mark
        # nothing, and the next pass would claim and publish the same rows again, for ever
        publish_until = time.monotonic() + LEASE_SHARE * self.claim_lease.total_seconds()
        batch = await self.source.run(
            calls.outbox_claim(self.relay_id, batch_size=self.batch_size, lease=self.claim_lease)
        )
        published: list[uuid.UUID] = []
        stopped_at: int | None = None
        for index, row in enumerate(batch):
            if index and time.monotonic() >= publish_until:
                # the rest goes back, and the next pass starts at once (not after an interval)
                stopped_at = index
                self._kick.set()
                break
            try:
                await self.target.run(calls.publish(row))
            except Exception as failure:
                # stop: a later row must never overtake this one
                log.error(
                    "jobs.outbox.publish-failed",
                    extra={
                        "relay": self.relay_id,
                        "id": str(row.id),
                        "error": str(failure),
                    },
                )
                stopped_at = index
                break
            published.append(row.id)
        marked = len(await self.mark_published(published)) if published else 0
        if marked < len(published):
            log.warning(
                "jobs.outbox.mark-missed",
                extra={
                    "relay": self.relay_id,
                    "published": len(published),
                    "marked": marked,
                    "hint": "the claim's lease ran out before the mark: raise claim_lease",
                },
            )
        if stopped_at is not None:
            # hand the rest back at once: a pool blip costs one interval, not a lease
            await self.source.run(
                calls.outbox_release(self.relay_id, [row.id for row in batch[stopped_at:]])
            )
        self.published += marked
        return marked

    async def mark_published(self, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return await self.source.run(calls.outbox_mark_published(self.relay_id, ids))
