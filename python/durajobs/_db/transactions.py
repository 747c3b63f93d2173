"""Enqueue inside the caller's transaction: a SQLAlchemy Session or AsyncSession, a SQLAlchemy
Connection, or a psycopg connection, given explicitly (`using=`) or ambiently for a unit of work
(`with durajobs.in_transaction(session):`).

The job's row (or, with an outbox, its staged row) is written on that transaction's own
connection, so a rollback leaves no job and a commit makes it visible and wakes the workers.
SQLAlchemy must use the psycopg 3 driver (`postgresql+psycopg://`): the calls run on its
connection as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from durajobs.errors import ConfigInvalid

_current: ContextVar[object | None] = ContextVar("durajobs_transaction", default=None)


@contextmanager
def in_transaction(transaction: object) -> Iterator[None]:
    """Make `transaction` the one every enqueue in this context joins (sync and async code)."""
    previous = _current.get()
    token = _current.set(transaction)
    try:
        yield
    finally:
        try:
            _current.reset(token)
        except ValueError:
            # left in another context than it was entered (a framework moved it): restore
            _current.set(previous)


def current_transaction() -> object | None:
    """The transaction an enclosing `in_transaction` made ambient, if any."""
    return _current.get()


def _psycopg(driver: object, source: object) -> Any:
    if not isinstance(driver, psycopg.Connection | psycopg.AsyncConnection):
        raise ConfigInvalid(
            f"{type(source).__name__} does not run on psycopg 3 (its driver connection is "
            f"{type(driver).__name__})",
            detail={"driver": type(driver).__name__},
            hint="create the engine with a postgresql+psycopg:// URL",
        )
    return driver


def is_async(transaction: object) -> bool:
    """True for an AsyncSession, a SQLAlchemy AsyncConnection or a psycopg AsyncConnection."""
    if isinstance(transaction, psycopg.AsyncConnection):
        return True
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    except ImportError:  # pragma: no cover - SQLAlchemy is a dependency
        return False
    return isinstance(transaction, AsyncSession | AsyncConnection)


def sync_connection(transaction: object) -> psycopg.Connection[Any]:
    """The psycopg connection under a sync transaction object (begun if it was not)."""
    if isinstance(transaction, psycopg.Connection):
        return transaction
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    if isinstance(transaction, Session):
        transaction = transaction.connection()
    if isinstance(transaction, Connection):
        if not transaction.in_transaction():
            # what SQLAlchemy's autobegin would do on its own first statement: without it the
            # job would sit in the driver's transaction, which conn.commit() never commits
            transaction.begin()
        connection: psycopg.Connection[Any] = _psycopg(
            transaction.connection.driver_connection, transaction
        )
        return connection
    raise ConfigInvalid(
        f"cannot enqueue on a {type(transaction).__name__}",
        detail={"type": type(transaction).__name__},
        hint="pass a SQLAlchemy Session or Connection, or a psycopg connection",
    )


async def async_connection(transaction: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg async connection under an async transaction object."""
    if isinstance(transaction, psycopg.AsyncConnection):
        return transaction
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(transaction, AsyncSession):
        transaction = await transaction.connection()
    if isinstance(transaction, AsyncConnection):
        if not transaction.in_transaction():
            await transaction.begin()
        raw = await transaction.get_raw_connection()
        connection: psycopg.AsyncConnection[Any] = _psycopg(raw.driver_connection, transaction)
        return connection
    raise ConfigInvalid(
        f"cannot enqueue on a {type(transaction).__name__}",
        detail={"type": type(transaction).__name__},
        hint="pass a SQLAlchemy AsyncSession or AsyncConnection, or a psycopg AsyncConnection",
    )


# a transaction begun and not ended (a closed connection's is UNKNOWN: it ended with it)
_OPEN = frozenset({TransactionStatus.ACTIVE, TransactionStatus.INTRANS, TransactionStatus.INERROR})


def open_transaction_probe(transaction: object | None) -> Callable[[], bool] | None:
    """A check of whether `transaction` (what an enqueue joined) is still open, for a wait on
    the job it enqueued: None when the enqueue joined none (it committed on its own)."""
    if transaction is None:
        return None
    in_transaction = getattr(transaction, "in_transaction", None)
    if callable(in_transaction):  # a SQLAlchemy Session or Connection, sync or async
        return lambda: bool(in_transaction())
    # a psycopg connection, or a durajobs Client's
    connection = getattr(transaction, "connection", transaction)
    if isinstance(connection, psycopg.Connection | psycopg.AsyncConnection):
        return lambda: not connection.closed and connection.info.transaction_status in _OPEN
    return None
