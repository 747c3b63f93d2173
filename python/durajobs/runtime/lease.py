"""Keep an attempt's lease: renew it every third of the visibility timeout, and tell the body
when the row is no longer ours.

Expiry is judged on this process's clock from the last renewal that LANDED, checked before each
call, so a hung call is caught too. A cancelled row is `jobs.lease.cancelled` (info, not a loss).
Once stopped (the settle is being sent) nothing is reported: a renewal racing the ack is not a
loss (the stopped flag is re-read after every await).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import timedelta

from durajobs._db import calls
from durajobs._values.records import ClaimedJob
from durajobs._values.states import HeartbeatAnswer
from durajobs.errors import JobCancelled, JobLeaseLost, JobSlotLost
from durajobs.runtime.attempt import Database
from durajobs.runtime.cancel import CancelSignal

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews one attempt's lease until `stop()`; cancels the attempt's signal on loss."""

    def __init__(
        self,
        db: Database,
        claimed: ClaimedJob,
        signal: CancelSignal,
        *,
        visibility: timedelta,
        on_lost: Callable[[ClaimedJob], None] | None = None,
        since: float | None = None,
        limited: bool = False,
    ) -> None:
        self._db = db
        self._claimed = claimed
        self._signal = signal
        self._visibility = visibility.total_seconds()
        self._interval = self._visibility / 3
        self._on_lost = on_lost
        # the row holds a place under a limit: its lease is that place, so losing one loses both
        self._limited = limited
        self._stopped = False
        # made with the renewal task: most attempts end before it, and an Event per attempt
        # was a measurable part of a short job's cost
        self._stop_event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        # when the lease began on this process's clock: the claim's send, not the attempt's start
        self._since = time.monotonic() if since is None else since

    def start(self) -> None:
        # a timer, not a task, until the first renewal is due: most attempts end before it, and
        # a task per attempt was a measurable part of a short job's cost
        self._timer = asyncio.get_running_loop().call_later(self._interval, self._begin)

    def _begin(self) -> None:
        self._timer = None
        if not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._keep(first_wait=0.0))

    def stop(self) -> None:
        self._stopped = True
        if self._stop_event is not None:
            self._stop_event.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def join(self) -> None:
        self.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def _lost(self, reason: str) -> None:
        if self._stopped:
            return
        self.stop()
        fields = {"job": self._claimed.name, "id": str(self._claimed.id), "reason": reason}
        log.error("jobs.lease.lost", extra=fields)
        detail = {"id": str(self._claimed.id), "reason": reason}
        lost: JobLeaseLost
        if self._limited:
            log.error("jobs.worker.slot-lost", extra=fields)
            lost = JobSlotLost(
                f"job {self._claimed.id} lost its place under its limit ({reason})", detail=detail
            )
        else:
            lost = JobLeaseLost(f"job {self._claimed.id} lease lost ({reason})", detail=detail)
        self._signal.cancel(lost)
        if self._on_lost is not None:
            self._on_lost(self._claimed)

    async def _keep(self, first_wait: float) -> None:
        last_landed = self._since
        wait = first_wait
        stop_event = self._stop_event = asyncio.Event()
        while not self._stopped:
            if wait > 0:
                try:
                    async with asyncio.timeout(wait):  # not wait_for: it can swallow a cancel
                        await stop_event.wait()
                    return
                except TimeoutError:
                    pass
            wait = self._interval
            remaining = self._visibility - (time.monotonic() - last_landed)
            if remaining <= 0:
                self._lost("expired")
                return
            sent = time.monotonic()  # the database stamps the new expiry from about now
            try:
                async with asyncio.timeout(remaining):
                    answer = await self._db.run(
                        calls.heartbeat(
                            self._claimed.fence, visibility=timedelta(seconds=self._visibility)
                        )
                    )
            except TimeoutError:
                self._lost("expired")
                return
            except Exception as failure:
                if not self._stopped:
                    log.warning(
                        "jobs.heartbeat.failed",
                        extra={
                            "job": self._claimed.name,
                            "id": str(self._claimed.id),
                            "error": str(failure),
                        },
                    )
                # try again soon enough to notice the end of the window in time
                wait = max(
                    min(self._interval, self._visibility - (time.monotonic() - last_landed)), 0.01
                )
                continue
            if self._stopped:
                return  # the settle went out while we asked: not a loss
            if answer is HeartbeatAnswer.OK:
                last_landed = sent
            elif answer is HeartbeatAnswer.CANCELLED:
                self.stop()
                log.info(
                    "jobs.lease.cancelled",
                    extra={"job": self._claimed.name, "id": str(self._claimed.id)},
                )
                self._signal.cancel(
                    JobCancelled(
                        f"job {self._claimed.id} was cancelled",
                        detail={"id": str(self._claimed.id)},
                    )
                )
                return
            else:
                self._lost("not-ours")
                return
