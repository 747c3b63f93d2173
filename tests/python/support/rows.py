"""Read the test database from a session of its own, outside whatever the test holds open."""

from __future__ import annotations

from typing import Any

import psycopg


def fetch_all(database_url: str, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """Run `query` in its own autocommit session; answer its rows, or [] if it returns none."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        cursor = connection.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def schema_exists(database_url: str) -> bool:
    """Answer whether the database holds the jobs schema."""
    return fetch_all(database_url, "select count(*) from pg_namespace where nspname = 'jobs'") == [
        (1,)
    ]
