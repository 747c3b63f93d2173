"""The queue's clock: only a database whose owner switched the test clock on reads a session's
`durajobs.now` (pgTAP's 010_util has the SQL side); from Python the refusal is PermissionDenied."""

from __future__ import annotations

from uuid import uuid4

import psycopg
import pytest

import durajobs
from durajobs.errors import from_database_error


def test_a_session_variable_does_not_move_a_fresh_installations_clock(make_empty_database):
    url = make_empty_database()
    durajobs.migrate(url)
    with psycopg.connect(url, autocommit=True, options="-c durajobs.now=2000-01-01") as session:
        session.execute(
            "select jobs.enqueue(name => 'tick', input => '{}', idempotency_key => 'k')"
        )
        [(created_at, real_now)] = session.execute(
            "select created_at, now() from jobs.jobs"
        ).fetchall()
    assert created_at.year == real_now.year != 2000


def test_a_role_that_does_not_own_the_schema_cannot_switch_the_test_clock_on(database_url):
    role = f"clock_{uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"create role {role} login password 'pw'")
        admin.execute(f"grant usage on schema jobs to {role}")
        admin.execute(f"grant select on jobs.error_codes to {role}")
        try:
            url = psycopg.conninfo.make_conninfo(database_url, user=role, password="pw")
            with (
                psycopg.connect(url, autocommit=True) as session,
                pytest.raises(psycopg.Error) as refused,
            ):
                session.execute("select jobs.use_test_clock()")
            translated = from_database_error(refused.value)
            assert isinstance(translated, durajobs.PermissionDenied)
            assert translated.code == "X_PERMISSION_DENIED"
        finally:
            admin.execute(f"drop owned by {role}")
            admin.execute(f"drop role {role}")
