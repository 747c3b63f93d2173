"""A real Postgres for every test that asks for one, in whichever folder it sits: unit/ (no
database), integration/ (one session at a time), concurrency/ (sessions racing), processes/
(real subprocesses and signals); support/ holds what they share.

Where the server comes from, in order: DURAJOBS_TEST_DATABASE_URL; a testcontainers Postgres when
a Docker engine answers; a throwaway cluster that pytest-postgresql starts from the machine's
binaries (not as root: Postgres refuses to run as root, and scripts/test then provides the URL
through Debian's pg_virtualenv). The schema is migrated once into a template database; every
test gets a fresh database copied from it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from glob import glob
from typing import Any

import psycopg
import pytest
from psycopg import sql

import durajobs

TEST_URL_VARIABLE = "DURAJOBS_TEST_DATABASE_URL"


def _machine_pg_ctl() -> str | None:
    found = shutil.which("pg_ctl")
    if found:
        return found
    candidates = sorted(glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return candidates[-1] if candidates else None


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


def _url_with_database(url: str, database: str) -> str:
    return psycopg.conninfo.make_conninfo(url, dbname=database)


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Answer a conninfo to a maintenance database of a real, running Postgres server."""
    given = os.environ.get(TEST_URL_VARIABLE)
    if given:
        yield given
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as container:
            yield container.get_connection_url()
        return
    if os.geteuid() == 0:
        raise pytest.UsageError(
            f"no test database: set {TEST_URL_VARIABLE}, or run ./scripts/test, which starts a "
            "throwaway cluster with pg_virtualenv (Postgres refuses to run as root)"
        )
    pg_ctl = _machine_pg_ctl()
    if pg_ctl is None:
        raise pytest.UsageError(
            f"no test database: set {TEST_URL_VARIABLE} or install PostgreSQL (apt-get install "
            "postgresql)"
        )
    from pytest_postgresql.executor import PostgreSQLExecutor  # noqa: F401

    proc: Any = request.getfixturevalue("machine_postgresql")
    yield (
        f"host={proc.host} port={proc.port} user={proc.user} dbname=postgres"
        + (f" password={proc.password}" if proc.password else "")
    )


try:
    from pytest_postgresql import factories

    machine_postgresql = factories.postgresql_proc(executable=_machine_pg_ctl() or "pg_ctl")
except ImportError:  # pragma: no cover - the test extra installs it
    pass


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_url, autocommit=True)


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    """Answer the name of a database holding the migrated schema, to copy per test."""
    name = f"durajobs_template_{os.getpid()}"
    with _admin(server_url) as admin:
        admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = _url_with_database(server_url, name)
    durajobs.migrate(url)
    # tests pin the clock with the session setting durajobs.now: a test database opts in
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("select jobs.use_test_clock()")
    yield name
    with _admin(server_url) as admin:
        admin.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


def _create_database(server_url: str, template: str | None) -> str:
    name = f"durajobs_test_{uuid.uuid4().hex[:12]}"
    with _admin(server_url) as admin:
        if template is None:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        else:
            admin.execute(
                sql.SQL("create database {} template {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
    return name


def _drop_database(server_url: str, name: str) -> None:
    with _admin(server_url) as admin:
        admin.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
        )


@pytest.fixture
def database_url(server_url: str, template_database: str) -> Iterator[str]:
    """Answer the conninfo of a fresh database with the schema installed."""
    name = _create_database(server_url, template_database)
    yield _url_with_database(server_url, name)
    _drop_database(server_url, name)


@pytest.fixture
def make_empty_database(server_url: str) -> Iterator[Any]:
    """Answer a function that creates a fresh, empty database and answers its conninfo."""
    created: list[str] = []

    def make() -> str:
        name = _create_database(server_url, None)
        created.append(name)
        return _url_with_database(server_url, name)

    yield make
    for name in created:
        _drop_database(server_url, name)


@pytest.fixture
def empty_database_url(make_empty_database: Any) -> str:
    """Answer the conninfo of a fresh database with nothing installed."""
    url: str = make_empty_database()
    return url


@pytest.fixture
def queue_url(make_empty_database: Any) -> str:
    """Answer the conninfo of a second fresh database with the schema installed: the queue an
    application's outbox is relayed into."""
    url: str = make_empty_database()
    durajobs.migrate(url)
    return url


@pytest.fixture
def client(database_url: str) -> Iterator[durajobs.Client]:
    """Answer a low-level client on an autocommit connection to a fresh database."""
    with durajobs.Client.connect(database_url) as opened:
        yield opened


@pytest.fixture
def connect(database_url: str) -> Iterator[Any]:
    """Answer a function that opens more autocommit sessions on the test database."""
    opened: list[psycopg.Connection[Any]] = []

    def open_session() -> psycopg.Connection[Any]:
        connection = psycopg.connect(database_url, autocommit=True)
        opened.append(connection)
        return connection

    yield open_session
    for connection in opened:
        connection.close()
