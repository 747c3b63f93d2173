"""Generated revisions: the difference between two catalogues, proven both ways on real data."""

from __future__ import annotations

import psycopg

from durajobs._db.migrations import functions_sql
from durajobs._db.revisions import (
    differences,
    functions_change,
    read_catalogue,
)

# a release that changes a body, an argument's name (which `create or replace` refuses), adds a
# function and removes one
NEXT_RELEASE = """
create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 999
$$;

drop function jobs.worker_running_v1(text);
create function jobs.worker_running_v1(worker text)
returns table (id uuid, claim bigint)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select j.id, j.claims from jobs.jobs j where j.state = 'running' and j.claimed_by = worker
$$;

create function jobs.added_in_the_next_release()
returns integer
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select 42
$$;

drop function jobs.promote_many(text, text, text, text);
"""


def _install(url: str, text: str) -> None:
    with psycopg.connect(url) as connection:
        connection.execute(text.encode())


def test_a_generated_revision_upgrades_keeping_rows_and_downgrades_exactly(make_empty_database):
    installed, released, pristine = (make_empty_database() for _ in range(3))
    _install(installed, functions_sql())
    _install(pristine, functions_sql())
    _install(released, functions_sql() + NEXT_RELEASE)
    with psycopg.connect(installed, autocommit=True) as connection:
        connection.execute(
            "select jobs.enqueue(name => 'kept', input => '{}', idempotency_key => 'k')"
        )
    upgrade, downgrade = functions_change(pristine, released), functions_change(released, pristine)

    _install(installed, upgrade)
    assert differences(read_catalogue(installed), read_catalogue(released)) == []
    with psycopg.connect(installed, autocommit=True) as connection:
        assert connection.execute("select jobs.version()").fetchone() == (999,)
        assert connection.execute("select count(*) from jobs.jobs").fetchone() == (1,)
    _install(installed, downgrade)
    assert read_catalogue(installed) == read_catalogue(pristine)


def test_the_generated_sql_names_only_what_changed(make_empty_database):
    pristine, released = make_empty_database(), make_empty_database()
    _install(pristine, functions_sql())
    _install(released, functions_sql() + NEXT_RELEASE)

    upgrade = functions_change(pristine, released)

    assert "drop function if exists jobs.promote_many(" in upgrade
    assert "drop function if exists jobs.worker_running_v1(worker_id text)" in upgrade
    assert upgrade.count("CREATE OR REPLACE FUNCTION") == 3  # version, worker_running, added
    assert functions_change(pristine, pristine) == "-- no function changed\n"
