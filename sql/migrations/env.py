"""Alembic environment for the durajobs schema.

The version table lives in the `jobs` schema, so durajobs' history sits beside an application's
own alembic history without touching it. The database comes from, in order: a connection handed
in by `durajobs.migrate` (config.attributes["connection"]), `-x database_url=...`, or the
DATABASE_URL environment variable.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Connection, create_engine, text

from durajobs._db.migrations import SCHEMA, VERSION_TABLE, sqlalchemy_url


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("database_url") or os.environ.get(
        "DATABASE_URL"
    )
    if not url:
        raise SystemExit(
            "durajobs: no database given; pass -x database_url=postgresql://... or set DATABASE_URL"
        )
    return sqlalchemy_url(url)


def _run(connection: Connection) -> None:
    # the version table needs its schema before the first revision runs
    connection.execute(text(f"create schema if not exists {SCHEMA}"))
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()
        # at base nothing of durajobs remains but the empty version table: remove it, and the
        # schema too unless someone else keeps objects there
        remaining = connection.execute(
            text(f"select count(*) from {SCHEMA}.{VERSION_TABLE}")
        ).scalar_one()
        if remaining == 0:
            connection.execute(text(f"drop table {SCHEMA}.{VERSION_TABLE}"))
            others = connection.execute(
                text("select count(*) from pg_class where relnamespace = to_regnamespace(:schema)"),
                {"schema": SCHEMA},
            ).scalar_one()
            others += connection.execute(
                text("select count(*) from pg_proc where pronamespace = to_regnamespace(:schema)"),
                {"schema": SCHEMA},
            ).scalar_one()
            if others == 0:
                connection.execute(text(f"drop schema {SCHEMA}"))


def run_migrations_online() -> None:
    handed_in = context.config.attributes.get("connection")
    if handed_in is not None:
        _run(handed_in)
        return
    engine = create_engine(_url())
    with engine.connect() as connection:
        _run(connection)
        connection.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("durajobs migrations run online only: they execute PL/pgSQL files")
run_migrations_online()
