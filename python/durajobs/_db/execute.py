"""Run the builders of `durajobs._db.calls` on a psycopg connection, sync or async.

`execute` and `execute_async` are the only places a call meets the driver, and the only places
a driver error is translated (through `errors.from_database_error`). The schema check lives
here too: it is the first call every executor makes.
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg

from durajobs._db import calls
from durajobs._db.calls import Call
from durajobs.errors import SchemaVersionMismatch, from_database_error

T = TypeVar("T")

# the oldest schema this package speaks; a newer one keeps the versioned worker protocol
# (claim_v1, ...) it was built against for one release, so a rolling deploy runs both
SCHEMA_VERSION = 26

# undefined_function, invalid_schema_name, undefined_table: the schema is not installed
_NOT_INSTALLED = {"42883", "3F000", "42P01"}


def execute(connection: psycopg.Connection[Any], call: Call[T]) -> T:
    """Run `call` on `connection` (inside its transaction, if one is open) and decode its rows."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(call.sql.encode(), call.params)
            rows = cursor.fetchall()
    except psycopg.Error as error:
        translated = from_database_error(error)
        if translated is error:
            raise
        raise translated from error
    return call.decode(rows)


async def execute_async(connection: psycopg.AsyncConnection[Any], call: Call[T]) -> T:
    """Run `call` on an async `connection` and decode its rows."""
    async with connection.cursor() as cursor:
        return await execute_on_cursor_async(cursor, call)


async def execute_on_cursor_async(cursor: psycopg.AsyncCursor[Any], call: Call[T]) -> T:
    """Run `call` on an open async `cursor` (its connection's transaction, if one is open) and
    decode its rows: for a caller that keeps one cursor for many calls."""
    try:
        await cursor.execute(call.sql.encode(), call.params)
        rows = await cursor.fetchall()
    except psycopg.Error as error:
        translated = from_database_error(error)
        if translated is error:
            raise
        raise translated from error
    return call.decode(rows)


def _mismatch(installed: int | None) -> SchemaVersionMismatch:
    found = "no jobs schema" if installed is None else f"jobs schema version {installed}"
    return SchemaVersionMismatch(
        f"this durajobs needs jobs schema version {SCHEMA_VERSION} or newer, the database has"
        f" {found}; "
        "run `durajobs migrate --database-url ...`",
        detail={"expected": SCHEMA_VERSION, "installed": installed},
    )


def check_schema(connection: psycopg.Connection[Any]) -> None:
    """Raise X_SCHEMA_VERSION_MISMATCH when the schema is missing or older than this package."""
    try:
        with connection.transaction():
            installed = execute(connection, calls.version())
    except psycopg.Error as error:
        if error.sqlstate in _NOT_INSTALLED:
            raise _mismatch(None) from error
        raise
    if installed < SCHEMA_VERSION:
        raise _mismatch(installed)


async def check_schema_async(connection: psycopg.AsyncConnection[Any]) -> None:
    """Async form of `check_schema`."""
    try:
        async with connection.transaction():
            installed = await execute_async(connection, calls.version())
    except psycopg.Error as error:
        if error.sqlstate in _NOT_INSTALLED:
            raise _mismatch(None) from error
        raise
    if installed < SCHEMA_VERSION:
        raise _mismatch(installed)
