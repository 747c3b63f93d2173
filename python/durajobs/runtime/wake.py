"""The wake: one LISTEN connection per worker process, so an idle worker starts new work at once.

The wake only shortens waits; the poll remains the guarantee. A listener is trusted (and the idle
ceiling raised to 5 s) only after a probe sent through the pool arrives on it: a transaction
pooling proxy swallows LISTEN silently. It is un-proven on every reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg

from durajobs._db import calls
from durajobs.runtime._asyncio import Spawn, cancel_and_wait, spawn_loose

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 2.0
RECONNECT_SECONDS = 1.0


class QueueWake:
    """Listens on a wake channel and calls `on_wake(queue)` for the wakes it cares about: on
    `jobs_wake` the tokens of the queues a worker serves (`tokens`, token -> queue: a wake
    carries no queue name, jobs.wake_tokens), anything on the outbox's channel for a relay
    (`tokens` None, and `on_wake` gets the payload)."""

    def __init__(
        self,
        database_url: str,
        tokens: Mapping[str, str] | None,
        on_wake: Callable[[str], None],
        send_probe: Callable[[str], Awaitable[None]],
        *,
        channel: str = calls.WAKE_CHANNEL,
    ) -> None:
        self._url = database_url
        self._tokens = tokens
        self._channel = channel
        self._on_wake = on_wake
        self._send_probe = send_probe
        self.proven = False
        # since when the LISTEN session has been down (None while it listens): readiness
        self.down_since: float | None = time.monotonic()
        self._probe_token = ""
        self._probe_heard: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._closing: set[asyncio.Future[None]] = set()  # connections opened after a stop

    def start(self, spawn: Spawn = spawn_loose) -> None:
        self._task = spawn("wake", self._run())

    async def stop(self) -> None:
        if self._task is not None:
            # not one cancel: a probe waiting on the pool could drop it and then listen forever
            await cancel_and_wait(self._task)
        if self._connection is not None:
            await self._connection.close()

    async def _run(self) -> None:
        warned = False
        lost = False
        while True:
            try:
                self._connection = await self._connect()
                await self._connection.execute(calls.listen(self._channel))
                self.down_since = None
                if lost:
                    # what was sent while the session was down is gone: a wake of each queue
                    # makes up for it, or new work would wait out the poll's idle wait
                    self._wake_all()
                listening = asyncio.get_running_loop().create_task(self._listen(self._connection))
                try:
                    self.proven = await self._probe()
                    if self.proven:
                        log.info("jobs.wake.live")
                    elif not warned:
                        warned = True
                        log.warning("jobs.wake.unverified")
                    await listening
                finally:
                    listening.cancel()
                    await asyncio.gather(listening, return_exceptions=True)
            except asyncio.CancelledError:
                raise
            except Exception as failure:
                log.warning("jobs.wake.lost", extra={"error": str(failure)})
            lost = True
            self.proven = False
            self.down_since = time.monotonic()
            if self._connection is not None:
                await self._connection.close()
                self._connection = None
            await asyncio.sleep(RECONNECT_SECONDS)

    def _wake_all(self) -> None:
        for queue in sorted(set(self._tokens.values())) if self._tokens is not None else [""]:
            self._on_wake(queue)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        attempt = asyncio.ensure_future(psycopg.AsyncConnection.connect(self._url, autocommit=True))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            # a connect cut mid-handshake leaves its server backend waiting for a client that
            # is gone (authentication_timeout: a minute), which also holds up DROP DATABASE:
            # let it finish, then close it
            attempt.add_done_callback(self._close_late_connection)
            raise

    def _close_late_connection(self, attempt: asyncio.Future[psycopg.AsyncConnection[Any]]) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            return
        closing = asyncio.ensure_future(attempt.result().close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _probe(self) -> bool:
        self._probe_token = f"probe:{uuid.uuid4()}"
        self._probe_heard = asyncio.Event()
        try:
            await self._send_probe(self._probe_token)
            # not asyncio.wait_for: before Python 3.12 it swallows a cancel (a stop) that lands
            # as the probe is heard, and the stop then waited on the listener forever
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                await self._probe_heard.wait()
        except (TimeoutError, psycopg.Error):
            return False
        return True

    async def _listen(self, connection: psycopg.AsyncConnection[Any]) -> None:
        async for notice in connection.notifies():
            if notice.payload == self._probe_token and self._probe_heard is not None:
                self._probe_heard.set()
            elif self._tokens is None:
                self._on_wake(notice.payload)
            elif notice.payload in self._tokens:
                self._on_wake(self._tokens[notice.payload])
            else:
                continue
            # what was woken runs first: going back to the socket for the next notification
            # (registering a reader, a system call or two) would otherwise come before it
            await asyncio.sleep(0)
