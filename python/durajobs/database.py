"""A pool of autocommit connections that runs builders: what the worker, steps and relay call."""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from durajobs.calls import Call
from durajobs.client import check_schema_async, execute_async

T = TypeVar("T")


class AsyncDatabase:
    """Run calls on pooled autocommit connections: each call is its own short transaction."""

    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.database_url = database_url
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            database_url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            open=False,
        )

    async def open(self) -> None:
        """Open the pool and check the schema version (X_SCHEMA_VERSION_MISMATCH)."""
        await self.pool.open(wait=True)
        async with self.pool.connection() as connection:
            await check_schema_async(connection)

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
