"""A small, lazily opened pool of autocommit connections for direct enqueues.

A `Registry` enqueue with no transaction to join used to open a connection per call (a TCP
connect and a login, several milliseconds each); this pool keeps a few open and checks one
before handing it out, so a connection a Postgres restart broke is replaced, not failed on.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from durajobs._db.calls import Call
from durajobs._db.execute import check_schema, execute

T = TypeVar("T")

DEFAULT_MAX_CONNECTIONS = 4
# what an operator sees for these connections in pg_stat_activity
APPLICATION_NAME = "durajobs-enqueue"


class SyncPool:
    """Run calls on pooled autocommit connections to `database_url`, opened at the first call."""

    def __init__(self, database_url: str, *, max_size: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.database_url = database_url
        self._max_size = max_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._lock = threading.Lock()

    def _opened(self) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._lock:
            if self._pool is None:
                pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                    self.database_url,
                    min_size=0,
                    max_size=self._max_size,
                    kwargs={"autocommit": True, "application_name": APPLICATION_NAME},
                    check=ConnectionPool.check_connection,
                    open=True,
                )
                with pool.connection() as connection:
                    try:
                        check_schema(connection)
                    except BaseException:
                        pool.close()
                        raise
                # an application that never closes its registry still leaves no thread behind
                weakref.finalize(self, pool.close)
                self._pool = pool
            return self._pool

    def run(self, call: Call[T]) -> T:
        with self._opened().connection() as connection:
            return execute(connection, call)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
