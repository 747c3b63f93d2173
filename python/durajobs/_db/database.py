"""A pool of autocommit connections that runs builders: what the worker, steps and relay call."""

from __future__ import annotations

import time
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from durajobs._db.calls import Call
from durajobs._db.execute import check_schema_async, execute_on_cursor_async

T = TypeVar("T")


# a connection back in the pool for less than this is trusted without a round trip: under load
# the check would double every call, and a connection that just worked rarely broke since
CHECK_AFTER_IDLE_SECONDS = 2.0
# how long one connection may be kept out of the pool for the next call before it goes back
KEEP_SECONDS = 60.0
# how long a call waits for a free connection before it fails (PoolTimeout); a worker passes a
# fraction of its lease, so a renewal never waits longer than the lease has left
DEFAULT_WAIT_SECONDS = 30.0
# libpq's own connect timeout, unless the URL sets one: a server that accepts no connection
# must not hold the pool's growing for minutes
CONNECT_TIMEOUT_SECONDS = 5


def may_land_if_sent_again(failure: BaseException) -> bool:
    """Whether `failure` came from the connection, the pool or the server's passing state (a
    lost or refused connection, a shutdown, a deadlock, a cancel: psycopg's OperationalError,
    the pool's timeout among them) rather than from what the statement carried (an X_* code,
    a value the server will not hold), which the same statement would meet again."""
    return isinstance(failure, psycopg.OperationalError | psycopg.InterfaceError)


class PooledConnection(psycopg.AsyncConnection[Any]):
    """A connection of an AsyncDatabase's pool, which notes when it last went back to the pool
    (on this process's clock; None: not yet). An attribute, not a weak dictionary's entry: those
    cost every call two Python-level lookups, a pickup's among them.

    It keeps one cursor for every call: a cursor made and closed per call (its adapters copied,
    its state reset twice) was about a tenth of the Python between a pickup's wake and its
    claim. The cursor holds the last call's result until the next call replaces it."""

    returned_at: float | None = None
    _kept_cursor: psycopg.AsyncCursor[Any] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[Any]:
        """The cursor every call on this connection runs on (a new one once closed)."""
        cursor = self._kept_cursor
        if cursor is None or cursor.closed:
            cursor = self._kept_cursor = self.cursor()
        return cursor


class AsyncDatabase:
    """Run calls on pooled autocommit connections: each call is its own short transaction."""

    def __init__(
        self,
        database_url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        wait_timeout: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.database_url = database_url
        self._sizes = (min_size, max_size)
        self._wait_timeout = wait_timeout
        self.pool = self._new_pool()
        # the connection kept out of the pool between calls (_give_back); the one being kept
        # call after call (it may be out on a call now), and since when
        self._kept: PooledConnection | None = None
        self._keeping: PooledConnection | None = None
        self._keeping_since = 0.0
        self._waiting = 0  # calls waiting for a connection from the pool
        # when a call last got its answer, on this process's clock: what readiness is judged on
        self.last_answer: float | None = None

    def _new_pool(self) -> AsyncConnectionPool[PooledConnection]:
        kwargs: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.database_url):
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
        # no `check=`: the pool sleeps 1, 2, 4 s ... between connections that fail it, so a
        # worker whose backends were all terminated stalled for up to 30 s; run() checks instead
        return AsyncConnectionPool(
            self.database_url,
            connection_class=PooledConnection,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            kwargs=kwargs,
            timeout=self._wait_timeout,
            open=False,
        )

    @staticmethod
    def _stamp_returned(connection: PooledConnection) -> None:
        """Note when `connection` goes back to the pool. Noted here rather than by the pool's
        reset hook, which it awaits on every return: 20 us a call."""
        connection.returned_at = time.monotonic()

    async def _alive(self, connection: PooledConnection) -> bool:
        """A connection that idled is asked one empty query; a dead one is closed, which makes
        the pool drop it and open another when it is given back."""
        returned = connection.returned_at
        if returned is not None and time.monotonic() - returned < CHECK_AFTER_IDLE_SECONDS:
            return True
        try:
            await connection.execute("")
        except psycopg.Error:
            await connection.close()
            return False
        return True

    async def open(self) -> None:
        """Open the pool (a fresh one after a close) and check the schema version."""
        if self.pool.closed and getattr(self.pool, "_opened", False):
            self.pool = self._new_pool()
        try:
            await self.pool.open(wait=True)
            async with self.pool.connection() as connection:
                await check_schema_async(connection)
                self._stamp_returned(connection)
        except BaseException:
            await self.pool.close()
            raise

    async def close(self) -> None:
        kept, self._kept = self._kept, None
        self._keeping = None
        if kept is not None:
            await self.pool.putconn(kept)
        await self.pool.close()

    async def run(self, call: Call[T]) -> T:
        """Run `call` on a live pooled connection. Dead ones met on the way are dropped at once
        (a Postgres restart or terminated backends leave a pool of them); after as many as the
        pool holds, the pool has opened fresh ones, and the last try takes one unchecked."""
        for _ in range(self._sizes[1]):
            connection = await self._take()
            try:
                if await self._alive(connection):
                    return await self._run_on(connection, call)
            finally:
                await self._give_back(connection)
        connection = await self._take()
        try:
            return await self._run_on(connection, call)
        finally:
            await self._give_back(connection)

    async def _take(self) -> PooledConnection:
        """The connection kept from the last call, else one from the pool. Not
        pool.connection(): its `async with connection` commits on the way out, which on an
        autocommit connection only takes the connection's lock."""
        kept, self._kept = self._kept, None
        if kept is not None:
            return kept
        self._waiting += 1
        try:
            return await self.pool.getconn()
        finally:
            self._waiting -= 1

    async def _give_back(self, connection: PooledConnection) -> None:
        """Keep one idle connection out of the pool for the next call: taking it and giving it
        back costs a worker's pickup about 0.05 ms between its wake and its body otherwise. Kept
        for KEEP_SECONDS at most, so the pool's own rules (a connection's lifetime, a drain)
        still reach it."""
        if (
            self._kept is None
            and not self._waiting  # a call waiting for the pool gets this one
            and not self.pool.closed
            and connection.pgconn.transaction_status == TransactionStatus.IDLE
        ):
            now = time.monotonic()
            if connection is not self._keeping:
                self._keeping, self._keeping_since = connection, now
            if now - self._keeping_since < KEEP_SECONDS:
                self._kept = connection
                return
        if connection is self._keeping:
            self._keeping = None
        await self.pool.putconn(connection)

    async def _run_on(self, connection: PooledConnection, call: Call[T]) -> T:
        try:
            answer = await execute_on_cursor_async(connection.kept_cursor(), call)
        except BaseException:
            self._stamp_returned(connection)
            raise
        # one clock read for both stamps: the answer is on the way to a pickup's body
        connection.returned_at = self.last_answer = time.monotonic()
        return answer

    async def __aenter__(self) -> AsyncDatabase:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
