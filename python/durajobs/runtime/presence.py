"""A worker's row in the live-workers registry (jobs.workers): announced at start, renewed with
the ids it holds, marked when it drains, forgotten when it stops.

The row expires one TTL (the worker's visibility timeout) after its last heartbeat, so a killed
worker leaves the listing by itself. A renewal that finds the row gone (swept after a long
stall) announces again. Every failure is logged and retried on the next beat: the registry is
for operators, and must never stop a worker from running jobs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from uuid import UUID

from durajobs._db import calls
from durajobs._db.database import AsyncDatabase
from durajobs.runtime._asyncio import Spawn, cancel_and_wait, spawn_loose

log = logging.getLogger(__name__)


class WorkerRegistration:
    """Keeps one worker's registry row live while the worker runs."""

    def __init__(
        self,
        db: AsyncDatabase,
        worker_id: str,
        *,
        queues: Sequence[str],
        slots: int,
        ttl: timedelta,
        in_flight: Callable[[], list[UUID]],
    ) -> None:
        self._db = db
        self.worker_id = worker_id
        self._queues = list(queues)
        self._slots = slots
        self.ttl = ttl
        # half the TTL: one beat can fail before the row expires, and an idle worker costs four
        # statements a minute for it
        self.every = ttl / 2
        self._in_flight = in_flight
        self._task: asyncio.Task[None] | None = None
        self.spawn: Spawn = spawn_loose  # the worker's supervisor once it runs

    async def start(self) -> None:
        await self._announce()
        self._task = self.spawn("presence", self._beat())

    async def _announce(self) -> None:
        try:
            await self._db.run(
                calls.worker_announce(
                    self.worker_id,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    queues=self._queues,
                    slots=self._slots,
                    ttl=self.ttl,
                )
            )
        except Exception as failure:
            log.warning(
                "jobs.worker.announce-failed",
                extra={"worker": self.worker_id, "error": str(failure)},
            )

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.every.total_seconds())
            try:
                live = await self._db.run(
                    calls.worker_heartbeat(self.worker_id, self._in_flight(), ttl=self.ttl)
                )
            except Exception as failure:
                log.warning(
                    "jobs.worker.heartbeat-failed",
                    extra={"worker": self.worker_id, "error": str(failure)},
                )
                continue
            if not live:
                await self._announce()

    async def mark_draining(self) -> None:
        try:
            await self._db.run(calls.worker_draining(self.worker_id))
        except Exception as failure:
            log.warning(
                "jobs.worker.draining-mark-failed",
                extra={"worker": self.worker_id, "error": str(failure)},
            )

    async def stop(self) -> None:
        """Stop renewing and delete the row (it would expire by itself if this fails)."""
        if self._task is not None:
            # not one cancel: a renewal waiting on the pool could drop it and beat on
            await cancel_and_wait(self._task)
            self._task = None
        try:
            await self._db.run(calls.worker_forget(self.worker_id))
        except Exception as failure:
            log.warning(
                "jobs.worker.forget-failed", extra={"worker": self.worker_id, "error": str(failure)}
            )
