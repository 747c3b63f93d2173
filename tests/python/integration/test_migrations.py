"""Installation: alembic revisions carry frozen SQL that must yield exactly sql/functions/."""

from __future__ import annotations

import json

import psycopg
import pytest

import durajobs
from durajobs._db.migrations import functions_sql, package_sql_dir
from durajobs._db.revisions import read_catalogue
from durajobs.errors import SchemaVersionMismatch
from support.paths import FIXTURES
from support.rows import schema_exists

SIGNATURES = """
    select p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid)
      from pg_proc p
     where p.pronamespace = 'jobs'::regnamespace
     order by 1, 2"""


def test_upgrading_from_empty_yields_exactly_sql_functions(make_empty_database):
    migrated, direct = make_empty_database(), make_empty_database()
    durajobs.migrate(migrated)
    with psycopg.connect(direct, autocommit=True) as connection:
        connection.execute(functions_sql().encode())

    by_alembic, by_source = read_catalogue(migrated), read_catalogue(direct)

    assert by_alembic["functions"], "the catalogue query read nothing"
    for part in by_source:
        assert by_alembic[part] == by_source[part], f"{part} differ from sql/functions/"


def test_up_down_up_leaves_the_applications_own_alembic_history_alone(empty_database_url):
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        connection.execute("create table public.alembic_version (version_num text primary key)")
        connection.execute("insert into public.alembic_version values ('app_0042')")

    durajobs.migrate(empty_database_url)
    assert schema_exists(empty_database_url)
    durajobs.downgrade(empty_database_url)
    assert not schema_exists(empty_database_url), "downgrade base must remove everything"
    durajobs.migrate(empty_database_url)

    head = _revisions()[-1]
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        assert connection.execute("select jobs.version()").fetchone() == (int(head),)
        assert connection.execute("select version_num from jobs.alembic_version").fetchall() == [
            (head,)
        ]
        assert connection.execute("select version_num from public.alembic_version").fetchall() == [
            ("app_0042",)
        ]


def _revisions() -> list[str]:
    versions = package_sql_dir() / "migrations" / "versions"
    return sorted(module.name[:4] for module in versions.glob("[0-9][0-9][0-9][0-9]_*.py"))


def test_each_revision_downgrades_to_exactly_the_one_before(make_empty_database):
    """Up to head, down a revision at a time: each step equals a database that stopped there,
    and below the first nothing of durajobs is left (test_revisions proves a generated pair on
    a change, before any second revision exists)."""
    revisions = _revisions()
    assert revisions[0] == "0001"
    stepped = make_empty_database()
    durajobs.migrate(stepped)
    for revision in reversed(revisions[:-1]):
        stopped = make_empty_database()
        durajobs.migrate(stopped, revision)
        durajobs.downgrade(stepped, revision)
        assert read_catalogue(stepped) == read_catalogue(stopped), f"down to {revision}"
    durajobs.downgrade(stepped)
    assert not schema_exists(stepped)
    durajobs.migrate(stepped)  # and up again
    with psycopg.connect(stepped, autocommit=True) as connection:
        assert connection.execute("select jobs.version()").fetchone() == (int(revisions[-1]),)


def test_the_baseline_keeps_every_signature_and_table_of_the_squashed_history(
    make_empty_database,
):
    """The baseline folded revisions 0001-0011: what a client sees is what they installed,
    except the one claim left (claim_v3's contract under the name claim_v1, answering the
    composite jobs.claimed_job, which gained has_steps). Later revisions change the catalogue
    on purpose, each proven by test_each_revision_downgrades_to_exactly_the_one_before."""
    before = json.loads((FIXTURES / "catalogue_before_baseline.json").read_text())
    database_url = make_empty_database()
    durajobs.migrate(database_url, "0001")
    with psycopg.connect(database_url, autocommit=True) as connection:
        functions = connection.execute(SIGNATURES).fetchall()
    now = {"functions": [list(row) for row in functions]}
    now |= {
        part: [json.loads(json.dumps(list(row), default=str)) for row in rows]
        for part, rows in read_catalogue(database_url).items()
        if part != "functions"
    }
    claim_args = before_claim = None
    for row in before["functions"]:
        if row[0] == "claim_v3":
            claim_args = row[1]
        if row[0] == "claim_v1":
            before_claim = row
    expected = [
        row for row in before["functions"] if row[0] not in ("claim_v1", "claim_v2", "claim_v3")
    ]
    expected.append(["claim_v1", claim_args, before_claim[2] if before_claim else None])
    assert sorted(now["functions"]) == sorted(expected)
    position = max(row[3] for row in before["types"] if row[0] == "claimed_job") + 1
    assert sorted(now["types"]) == sorted(
        [*before["types"], ["claimed_job", "has_steps", "boolean", position]]
    )
    for part in ("columns", "indexes", "constraints", "error_codes", "storage"):
        assert now[part] == before[part], part


def test_the_package_refuses_a_database_without_the_schema(empty_database_url):
    with pytest.raises(SchemaVersionMismatch, match="durajobs migrate") as raised:
        durajobs.Client.connect(empty_database_url)
    assert raised.value.detail["installed"] is None


def _set_version(database_url, version):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            f"create or replace function jobs.version() returns integer language sql"
            f" as 'select {version}'"
        )


def test_the_package_refuses_a_schema_older_than_it_needs(database_url):
    _set_version(database_url, 0)
    with pytest.raises(SchemaVersionMismatch, match="durajobs migrate") as raised:
        durajobs.Client.connect(database_url)
    assert raised.value.detail == {"expected": durajobs.SCHEMA_VERSION, "installed": 0}


def test_a_newer_schema_is_accepted_during_a_rolling_deploy(database_url):
    """A newer revision keeps the _v1 worker protocol, so old workers keep running."""
    _set_version(database_url, durajobs.SCHEMA_VERSION + 1)
    with durajobs.Client.connect(database_url) as client:
        assert client.claim(["default"], "old-worker") == []


def test_a_hostile_search_path_at_install_binds_nothing_to_its_schema(make_empty_database):
    """Installed by a session whose search_path puts another schema's `=` first, the index
    predicates, constraints and defaults still use pg_catalog's: the DDL runs with the path
    pinned (otherwise the dedupe index's `state = ANY (...)` binds to the stranger)."""
    url = make_empty_database()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("create schema hostile")
        connection.execute(
            "create function hostile.always(text, text) returns boolean"
            " language sql immutable as 'select true'"
        )
        connection.execute(
            "create operator hostile.= (leftarg = text, rightarg = text, function = hostile.always)"
        )
    hostile = psycopg.conninfo.make_conninfo(url, options="-c search_path=hostile,pg_catalog")
    durajobs.migrate(hostile)

    catalogue = read_catalogue(url)
    mentions = [
        row
        for part in ("indexes", "constraints", "columns")
        for row in catalogue[part]
        if "hostile" in " ".join(str(value) for value in row)
    ]
    assert mentions == []
    with psycopg.connect(url, autocommit=True) as connection:
        for key in ("a", "a"):
            connection.execute(
                "select jobs.enqueue(name => 'j', input => '{}', idempotency_key => %s)", [key]
            )
        assert connection.execute("select count(*) from jobs.jobs").fetchone() == (1,)


def test_revision_0026_counts_the_standing_limits_again(empty_database_url):
    """0025 counted the limits before its triggers existed: a limit written between the two
    went uncounted, and with the count at 0 the claim would ignore it. 0026 recounts."""
    durajobs.migrate(empty_database_url, revision="0025")
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        connection.execute("select jobs.set_limit(queue => 'q', concurrency => 2)")
        # the missed increment, made by hand
        connection.execute("update jobs.limits_standing set standing = 0")
    durajobs.migrate(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as connection:
        assert connection.execute("select standing from jobs.limits_standing").fetchall() == [(1,)]
