"""The operator functions from Python: keyset pages, remove, promote, bulk calls."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from durajobs import errors
from durajobs._db import calls


def test_rows_created_in_one_millisecond_page_exactly_once_both_ways(client):
    """R89: the seek reads the cursor row's own created_at, not a rounded value."""
    client.connection.execute("set durajobs.now = '2026-01-01 00:00:00.123456+00'")
    ids = [client.enqueue("n", {}, f"k{n}").id for n in range(5)]
    client.connection.execute("reset durajobs.now")
    newest_first = sorted(ids, reverse=True)  # one created_at: the id breaks the tie

    forward, page = [], client.run(calls.list_jobs(page_size=2))
    while page:
        forward += [row.id for row in page]
        page = client.run(calls.list_jobs(page_size=2, after=page[-1].id)) if len(page) == 2 else []
    assert forward == newest_first

    backward, page = [], client.run(calls.list_jobs(page_size=2, after=ids[1]))
    backward = [row.id for row in page]
    while page:
        page = client.run(calls.list_jobs(page_size=2, before=page[0].id))
        backward = [row.id for row in page] + backward
    assert backward == newest_first


def test_a_bad_page_is_refused_with_its_code(client):
    job = client.enqueue("n", {}, "k")
    with pytest.raises(errors.JobPageInvalid):
        client.run(calls.list_jobs(page_size=201))
    with pytest.raises(errors.JobPageInvalid):
        client.run(calls.list_jobs(after=job.id, before=job.id))
    with pytest.raises(errors.JobPageInvalid) as raised:
        client.run(calls.list_jobs(after=uuid4()))  # an id no page answered
    assert raised.value.detail["argument"] == "after"


def test_remove_and_promote_refuse_what_they_cannot_do(client):
    running = client.enqueue("n", {}, "running")
    client.claim(["default"], "w")
    with pytest.raises(errors.JobNotRemovable):
        client.run(calls.remove(running.id))
    later = client.enqueue("n", {}, "later", run_at=datetime.now(UTC) + timedelta(hours=1))
    assert client.run(calls.promote(later.id)) is True
    with pytest.raises(errors.JobNotPromotable):
        client.run(calls.promote(later.id))  # due now already
    assert client.run(calls.remove(later.id)) is True
    with pytest.raises(errors.JobNotFound):
        client.run(calls.remove(later.id))


def test_bulk_calls_run_until_zero(client, database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        for n in range(3):
            connection.execute(
                "select jobs.enqueue(name => 'bulk', input => '{}', idempotency_key => %s,"
                " run_at => now() + interval '1 hour')",
                [f"k{n}"],
            )
    result = client.run(calls.promote_many("delayed", name="bulk"))
    assert (result.affected, result.remaining) == (3, 0)
    again = client.run(calls.promote_many("delayed", name="bulk"))
    assert (again.affected, again.remaining) == (0, 0)
    removed = client.run(calls.remove_many("ready", name="bulk"))
    assert (removed.affected, removed.remaining) == (3, 0)


def test_a_bulk_requeue_leaves_a_row_claimed_after_it_chose_the_row(database_url):
    """requeue_many chooses its rows, then locks them: a row another session moved on in
    between (here: claimed again) is judged again under the lock and left alone. Before revision
    0009 the lock re-read the row by id only, so the running row was reset to ready while its
    worker ran it. A row-level-security policy that sleeps on the row holds the operator's call
    between choosing and locking."""
    operator_role = f"slow_operator_{uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        row_id = admin.execute(
            "select id from jobs.enqueue(name => 'rq', input => '{}', idempotency_key => 'rq')"
        ).fetchone()[0]
        admin.execute(
            "update jobs.jobs set state = 'dead', finished_at = now() where id = %s", [row_id]
        )
        admin.execute(f"create role {operator_role}")
        try:
            admin.execute(f"grant usage on schema jobs to {operator_role}")
            admin.execute(f"grant select, update on jobs.jobs to {operator_role}")
            admin.execute(
                f"create function public.pause_on_{operator_role}(id uuid) returns boolean"
                " language plpgsql volatile as $$ begin"
                f" if id = '{row_id}' then perform pg_sleep(0.5); end if; return true; end $$"
            )
            admin.execute(
                f"create policy pause on jobs.jobs to {operator_role}"
                f" using (public.pause_on_{operator_role}(id))"
            )
            admin.execute("alter table jobs.jobs enable row level security")

            answers: list[Any] = []
            with psycopg.connect(database_url, autocommit=True) as operator:
                operator.execute(f"set role {operator_role}")
                pid = operator.info.backend_pid
                call = threading.Thread(
                    target=lambda: answers.append(
                        operator.execute("select * from jobs.requeue_many('dead')").fetchone()
                    )
                )
                call.start()
                _wait_until_sleeping(admin, pid)
                # meanwhile the row is requeued and claimed by a worker, committed
                admin.execute(
                    "update jobs.jobs set state = 'running', attempt = 1, claimed_by = 'w2',"
                    " lease_expires_at = now() + interval '30 seconds', finished_at = null"
                    " where id = %s",
                    [row_id],
                )
                call.join(timeout=30)
            assert len(answers) == 1, "the call did not return"
            assert answers[0][0] == 0  # affected: nothing moved
            state, claimed_by = admin.execute(
                "select state, claimed_by from jobs.jobs where id = %s", [row_id]
            ).fetchone()
            assert (state, claimed_by) == ("running", "w2")
        finally:
            admin.execute("alter table jobs.jobs disable row level security")
            admin.execute("drop policy if exists pause on jobs.jobs")
            admin.execute(f"drop function if exists public.pause_on_{operator_role}(uuid)")
            admin.execute(f"drop owned by {operator_role}")
            admin.execute(f"drop role {operator_role}")


def _wait_until_sleeping(admin: psycopg.Connection[Any], pid: int) -> None:
    for _ in range(200):
        waiting = admin.execute(
            "select wait_event from pg_stat_activity where pid = %s", [pid]
        ).fetchone()
        if waiting and waiting[0] == "PgSleep":
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never reached its pause")
