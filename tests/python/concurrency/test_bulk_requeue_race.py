"""A bulk requeue racing a claim: the row another session moved on between the call choosing it
and locking it is judged again under the lock."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import uuid4

import psycopg


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
            # the functions run as their owner, whom no policy holds up: this one runs as its
            # caller here, so the pausing policy below applies to it
            admin.execute(
                "alter function jobs.requeue_many(text, text, text, text) security invoker"
            )
            admin.execute(f"grant execute on all functions in schema jobs to {operator_role}")
            admin.execute(f"grant select on all tables in schema jobs to {operator_role}")
            # the tenant policy would answer for the row on its own (permissive policies are
            # or'ed), and the pause below would never be asked
            admin.execute("drop policy tenant_rows on jobs.jobs_history")
            admin.execute(f"grant select, update on jobs.jobs to {operator_role}")
            admin.execute(f"grant select, update, delete on jobs.jobs_history to {operator_role}")
            admin.execute(f"grant select, insert on jobs.jobs_live to {operator_role}")
            admin.execute(
                f"create function public.pause_on_{operator_role}(id uuid) returns boolean"
                " language plpgsql volatile as $$ begin"
                f" if id = '{row_id}' then perform pg_sleep(0.5); end if; return true; end $$"
            )
            admin.execute(
                f"create policy pause on jobs.jobs_history to {operator_role}"
                f" using (public.pause_on_{operator_role}(id))"
            )
            admin.execute("alter table jobs.jobs_history enable row level security")

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
                # meanwhile the row is requeued and claimed by a worker, committed (through the
                # view, so it moves from the history back to the live table)
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
            admin.execute("alter table jobs.jobs_history disable row level security")
            admin.execute("drop policy if exists pause on jobs.jobs_history")
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
