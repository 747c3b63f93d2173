"""Keep the leases of every attempt a worker holds: one renewal statement a round for all of them
(`jobs.heartbeat_many_v1`, each row fenced on its own claim), not a timer and a call per attempt.

A lease is renewed once a third of the visibility timeout has passed since its last renewal
that LANDED; a round renews every lease at least half that old, so leases claimed at different
moments share rounds. Expiry is judged on this process's clock from the last landed renewal,
checked before each round, so a hung call is caught too: a lease whose window ran out is lost
(`jobs.lease.lost`, reason `expired`), one another claim took is lost (`not-ours`), and a
cancelled row is `jobs.lease.cancelled` (info, not a loss). A limited job's running row is its
place under its limits, so its lost lease is a lost place (`jobs.worker.slot-lost`,
X_JOB_SLOT_LOST). Once a lease is stopped (its settle is being sent) nothing is reported for
it: a renewal racing the ack is not a loss.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from durajobs._db import calls
from durajobs._db.calls import Call
from durajobs._values.records import ClaimedJob
from durajobs._values.states import HeartbeatAnswer
from durajobs.errors import JobCancelled, JobLeaseLost, JobSlotLost
from durajobs.runtime._asyncio import Spawn, cancel_and_wait, spawn_loose
from durajobs.runtime.cancel import CancelSignal

log = logging.getLogger(__name__)

# the shortest wait between two rounds whose renewals failed: often enough to try again before a
# window ends, rarely enough not to spin on a database that is away
RETRY_FLOOR = 0.01  # seconds


class HeldLease:
    """One attempt's lease in its worker's renewer: `stop()` when the settle goes out."""

    __slots__ = ("_renewer", "claimed", "last_landed", "limited", "signal", "stopped")

    def __init__(
        self,
        renewer: LeaseRenewer,
        claimed: ClaimedJob,
        signal: CancelSignal,
        since: float,
        limited: bool,
    ) -> None:
        self._renewer = renewer
        self.claimed = claimed
        self.signal = signal
        # the lease began when the claim was sent, on this process's clock
        self.last_landed = since
        self.limited = limited
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._renewer.forget(self)

    def overdue(self) -> float:
        """Seconds past the lease's end on this process's clock (zero or less: still held)."""
        return time.monotonic() - self.last_landed - self._renewer.visibility

    async def join(self) -> None:
        """Stop it; the renewer never waits on one attempt, so there is nothing to await."""
        self.stop()


class LeaseRenewer:
    """Renews the leases a worker holds, all due ones in one statement a round."""

    def __init__(
        self,
        run: Callable[[Call[Any]], Awaitable[Any]],
        worker_id: str,
        *,
        visibility: timedelta,
    ) -> None:
        self._run = run
        self._worker_id = worker_id
        self._visibility_delta = visibility
        self._visibility = visibility.total_seconds()
        self._interval = self._visibility / 3
        self.visibility = self._visibility  # seconds, read by each lease
        # insertion-ordered, keyed by the lease itself: hashing a UUID costs a Python call
        self._held: dict[HeldLease, None] = {}
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle_round = False  # a lease arrived while nothing was held: batch_held wakes
        self.spawn: Spawn = spawn_loose  # the worker's supervisor once it runs

    def hold(
        self, claimed: ClaimedJob, signal: CancelSignal, since: float, limited: bool = False
    ) -> HeldLease:
        """Start keeping the lease of a claimed attempt (positional: one is held a job)."""
        lease = HeldLease(self, claimed, signal, since, limited)
        self._held[lease] = None
        if len(self._held) == 1:
            self._idle_round = True  # its next due time starts from this one: see batch_held
        return lease

    def batch_held(self) -> None:
        """The leases of a claimed batch are held: start the renewal rounds, or wake a round
        that waited with nothing held. Called once the batch's bodies are started, so that a
        pickup's body runs before the renewer works out when its next round is due."""
        if not self._idle_round:
            return
        self._idle_round = False
        if self._task is None:
            self._changed = asyncio.Event()
            self._task = self.spawn("lease renewal", self._keep())
        elif self._changed is not None:
            self._changed.set()

    def forget(self, lease: HeldLease) -> None:
        self._held.pop(lease, None)

    async def close(self) -> None:
        """Stop renewing (the worker is gone); the held leases lapse on their own."""
        task, self._task = self._task, None
        if task is not None:
            # not one cancel: the settle pool's wait for a connection can drop it
            # (durajobs.runtime._asyncio), and the renewals would go on, the teardown waiting
            await cancel_and_wait(task)

    async def _keep(self) -> None:
        changed = self._changed
        assert changed is not None
        wait: float | None = None
        while True:
            if wait is None:
                wait = self._next_due()
            if wait is None or wait > 0:
                changed.clear()
                try:
                    async with asyncio.timeout(wait):  # not wait_for: it can swallow a cancel
                        await changed.wait()
                except TimeoutError:
                    pass
                wait = None
                continue
            try:
                wait = await self._round()
            except Exception as failure:  # a bug here must not stop every renewal for good
                log.error("jobs.heartbeat.crashed", extra={"error": repr(failure)})
                wait = self._interval

    def _next_due(self) -> float | None:
        """Seconds until the oldest lease needs renewing; None with nothing held."""
        if not self._held:
            return None
        oldest = min(lease.last_landed for lease in self._held)
        return oldest + self._interval - time.monotonic()

    async def _round(self) -> float | None:
        """Renew every lease at least half a renewal interval old; answer how long to wait
        before the next round (None: as the leases' ages say)."""
        now = time.monotonic()
        due: list[HeldLease] = []
        for lease in list(self._held):
            if now - lease.last_landed >= self._visibility:
                self._lost(lease, "expired")
            elif now - lease.last_landed >= self._interval / 2:
                due.append(lease)
        if not due:
            return None
        remaining = min(self._visibility - (now - lease.last_landed) for lease in due)
        sent = time.monotonic()  # the database stamps the new expiries from about now
        try:
            async with asyncio.timeout(remaining):
                answers = await self._run(
                    calls.heartbeat_many(
                        self._worker_id,
                        [lease.claimed.fence for lease in due],
                        visibility=self._visibility_delta,
                    )
                )
        except TimeoutError:
            return 0.0  # the next round judges each lease's window on its own
        except Exception as failure:
            live = [lease for lease in due if not lease.stopped]
            for lease in live:
                log.warning(
                    "jobs.heartbeat.failed",
                    extra={
                        "job": lease.claimed.name,
                        "id": str(lease.claimed.id),
                        "error": str(failure),
                    },
                )
            # again soon enough to notice the end of the first window in time
            ends = [self._visibility - (time.monotonic() - lease.last_landed) for lease in live]
            return max(min([self._interval, *ends]), RETRY_FLOOR)
        unanswered: list[HeldLease] = []
        for lease in due:
            if lease.stopped:
                continue  # its settle went out while we asked: not a loss
            answer = answers.get((lease.claimed.id, lease.claimed.claim))
            if answer is None:
                # never the SQL's way (it answers every id), and not a loss: only an explicit
                # 'lost' ends an attempt; this renewal is tried again like a failed one (R91)
                unanswered.append(lease)
                log.warning(
                    "jobs.heartbeat.failed",
                    extra={
                        "job": lease.claimed.name,
                        "id": str(lease.claimed.id),
                        "error": "no answer for this lease",
                    },
                )
            elif answer is HeartbeatAnswer.OK:
                lease.last_landed = sent
            elif answer is HeartbeatAnswer.CANCELLED:
                self._cancelled(lease)
            else:
                self._lost(lease, "not-ours")
        if unanswered:
            now = time.monotonic()
            ends = [self._visibility - (now - lease.last_landed) for lease in unanswered]
            return max(min([self._interval, *ends]), RETRY_FLOOR)
        return None

    def _cancelled(self, lease: HeldLease) -> None:
        lease.stop()
        claimed = lease.claimed
        log.info("jobs.lease.cancelled", extra={"job": claimed.name, "id": str(claimed.id)})
        lease.signal.cancel(
            JobCancelled(f"job {claimed.id} was cancelled", detail={"id": str(claimed.id)})
        )

    def _lost(self, lease: HeldLease, reason: str) -> None:
        lease.stop()
        claimed = lease.claimed
        fields = {"job": claimed.name, "id": str(claimed.id), "reason": reason}
        log.error("jobs.lease.lost", extra=fields)
        detail = {"id": str(claimed.id), "reason": reason}
        lost: JobLeaseLost
        if lease.limited:
            log.error("jobs.worker.slot-lost", extra=fields)
            lost = JobSlotLost(
                f"job {claimed.id} lost its place under its limit ({reason})", detail=detail
            )
        else:
            lost = JobLeaseLost(f"job {claimed.id} lease lost ({reason})", detail=detail)
        lease.signal.cancel(lost)
