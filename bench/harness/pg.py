"""The throwaway server: databases made fresh for each measurement, and what the server tells
about them (pg_stat_statements, table sizes, dead tuples)."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import sql


def server_url(database: str | None = None) -> str:
    """A URL for the server pg_virtualenv (or the caller's PG* variables) points at."""
    host = os.environ.get("PGHOST", "localhost")
    port = os.environ.get("PGPORT", "5432")
    user = os.environ.get("PGUSER", "postgres")
    password = os.environ.get("PGPASSWORD", "")
    name = database or os.environ.get("PGDATABASE", "postgres")
    credentials = f"{user}:{password}" if password else user
    if host.startswith("/"):
        return f"postgresql://{credentials}@/{name}?host={host}&port={port}"
    return f"postgresql://{credentials}@{host}:{port}/{name}"


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(server_url("postgres"), autocommit=True)


def fresh_database(name: str) -> str:
    with admin() as connection:
        connection.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )
        connection.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return server_url(name)


def drop_database(name: str) -> None:
    with admin() as connection:
        connection.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


def scalar(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(query).fetchone()
        return None if row is None else row[0]


def reset_statements() -> None:
    with admin() as connection:
        connection.execute("create extension if not exists pg_stat_statements")
        connection.execute("select pg_stat_statements_reset()")


def statements_in(database: str) -> int:
    """Statements the server ran in `database` since the last reset."""
    with admin() as connection:
        row = connection.execute(
            "select coalesce(sum(s.calls), 0)::bigint from pg_stat_statements s"
            " join pg_database d on d.oid = s.dbid where d.datname = %s",
            [database],
        ).fetchone()
    return int(row[0]) if row else 0


def table_health(url: str, schema: str, table_like: str) -> dict[str, int]:
    """Heap and index bytes, and dead tuples, of the system's tables."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "select coalesce(sum(pg_table_size(c.oid)), 0)::bigint,"
            "       coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,"
            "       coalesce(sum(s.n_dead_tup), 0)::bigint"
            "  from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            "  left join pg_stat_user_tables s on s.relid = c.oid"
            " where c.relkind in ('r', 'p') and n.nspname = %s and c.relname like %s",
            [schema, table_like],
        ).fetchone()
    assert row is not None
    return {"table_bytes": int(row[0]), "index_bytes": int(row[1]), "dead_tuples": int(row[2])}


def settings() -> dict[str, str]:
    names = [
        "server_version",
        "shared_buffers",
        "max_connections",
        "synchronous_commit",
        "fsync",
        "work_mem",
        "shared_preload_libraries",
        "autovacuum",
    ]
    with admin() as connection:
        rows = connection.execute(
            "select name, setting || coalesce(unit, '') from pg_settings where name = any(%s)",
            [names],
        ).fetchall()
    return {name: value for name, value in rows}
