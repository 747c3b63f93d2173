"""A Go or Node shop installs and upgrades with psql alone: `durajobs sql` applied by psql gives
the catalogue `durajobs migrate` gives, and alembic takes over the database afterwards."""

from __future__ import annotations

import shutil
import subprocess

import psycopg
import pytest

import durajobs
from durajobs._db.install_script import install_script, revisions, shipped_install_script
from durajobs._db.revisions import read_catalogue

pytestmark = pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")


def _psql(database_url: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["psql", "--no-psqlrc", "-q", "-v", "ON_ERROR_STOP=1", "-d", database_url, "-f", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _installed_revision(database_url: str) -> list[tuple[str]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute("select version_num from jobs.alembic_version").fetchall()


def test_install_sql_by_psql_equals_alembic_head(make_empty_database):
    by_psql, by_alembic = make_empty_database(), make_empty_database()
    done = _psql(by_psql, shipped_install_script())
    assert done.returncode == 0, done.stderr
    durajobs.migrate(by_alembic)

    assert read_catalogue(by_psql) == read_catalogue(by_alembic)
    assert _installed_revision(by_psql) == [(revisions()[-1],)]
    durajobs.migrate(by_psql)  # alembic reads the recorded revision: nothing left to do
    assert _installed_revision(by_psql) == [(revisions()[-1],)]
    with durajobs.Client.connect(by_psql) as client:
        assert client.enqueue("n", {}, "k").deduped is False


def test_install_sql_refuses_a_database_already_installed_and_changes_nothing(database_url):
    before = read_catalogue(database_url)
    done = _psql(database_url, shipped_install_script())
    assert done.returncode != 0
    assert "durajobs is already installed here (revision" in done.stderr
    assert "durajobs sql --since" in done.stderr
    assert read_catalogue(database_url) == before


def test_an_upgrade_script_by_psql_brings_an_older_revision_to_head(make_empty_database):
    upgraded, by_alembic = make_empty_database(), make_empty_database()
    first = revisions()[0]
    durajobs.migrate(upgraded, first)
    durajobs.migrate(by_alembic)

    wrong = _psql(by_alembic, install_script(since=first))
    assert wrong.returncode != 0
    assert f"this script upgrades durajobs revision {first}" in wrong.stderr

    done = _psql(upgraded, install_script(since=first))
    assert done.returncode == 0, done.stderr
    assert read_catalogue(upgraded) == read_catalogue(by_alembic)
    assert _installed_revision(upgraded) == [(revisions()[-1],)]
    durajobs.downgrade(upgraded, first)  # and alembic can walk it back
    assert _installed_revision(upgraded) == [(first,)]
