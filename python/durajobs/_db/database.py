"""A pool of autocommit connections that runs builders: what the worker, steps and relay call."""

from __future__ import annotations

import time
import weakref
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from durajobs._db.calls import Call
from durajobs._db.execute import check_schema_async, execute_async

T = TypeVar("T")

# a connection back in the pool for less than this is trusted without a round trip: under load
# the check would double every call, and a connection that just worked rarely broke since
CHECK_AFTER_IDLE_SECONDS = 2.0


class AsyncDatabase:
    """Run calls on pooled autocommit connections: each call is its own short transaction."""

    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.database_url = database_url
        self._sizes = (min_size, max_size)
        self._returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self.pool = self._new_pool()

    def _new_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        return AsyncConnectionPool(
            self.database_url,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            kwargs={"autocommit": True},
            # a connection a Postgres restart broke is replaced before use, not failed on an ack
            check=self._check_if_idle,
            reset=self._stamp_returned,
            open=False,
        )

    async def _stamp_returned(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self._returned[connection] = time.monotonic()

    async def _check_if_idle(self, connection: psycopg.AsyncConnection[Any]) -> None:
        returned = self._returned.get(connection)
        if returned is not None and time.monotonic() - returned < CHECK_AFTER_IDLE_SECONDS:
            return
        await AsyncConnectionPool.check_connection(connection)

    async def open(self) -> None:
        """Open the pool (a fresh one after a close) and check the schema version."""
        if self.pool.closed and getattr(self.pool, "_opened", False):
            self.pool = self._new_pool()
        try:
            await self.pool.open(wait=True)
            async with self.pool.connection() as connection:
                await check_schema_async(connection)
        except BaseException:
            await self.pool.close()
            raise

    async def close(self) -> None:
        await self.pool.close()

    async def run(self, call: Call[T]) -> T:
        async with self.pool.connection() as connection:
            return await execute_async(connection, call)

    async def __aenter__(self) -> AsyncDatabase:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
