"""The Python shim and the SQL schema agree: codes, vocabularies, function and argument names
(the catalogue's own checks, which need no database, are unit/test_error_catalogue)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from durajobs import Fence
from durajobs._db import calls
from durajobs._db.migrations import package_sql_dir
from durajobs._values.states import LIVE_STATES, JobState, NackTarget, StepStatus
from durajobs.errors import registered_errors


def _one_column(client, query):
    return [row[0] for row in client.connection.execute(query).fetchall()]


def test_every_function_pins_its_search_path(client):
    unpinned = _one_column(
        client,
        """select p.oid::regprocedure::text
             from pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and not coalesce('search_path=pg_catalog, pg_temp' = any(p.proconfig), false)
              -- a SQL-standard body (begin atomic) is bound when made: no path redirects it
              and p.prosqlbody is null""",
    )
    assert unpinned == []


def test_sql_error_codes_and_python_classes_are_the_same_set(client):
    in_sql = dict(client.connection.execute("select code, sqlstate from jobs.error_codes"))
    in_python = {code: cls.sqlstate for code, cls in registered_errors().items() if cls.sqlstate}
    assert in_sql == in_python


def test_sql_and_python_give_the_same_fix_for_each_code(client):
    in_sql = dict(client.connection.execute("select code, fix from jobs.error_codes"))
    in_python = {code: registered_errors()[code].fix for code in in_sql}
    assert in_python == in_sql


def test_every_code_raised_in_sql_is_registered(client):
    registered = set(_one_column(client, "select code from jobs.error_codes"))
    raised = set()
    for path in (package_sql_dir() / "functions").glob("*.sql"):
        raised |= set(re.findall(r"_raise\(\s*'(X_[A-Z_]+)'", path.read_text()))
    raised.add("X_ARGUMENT_INVALID")  # raised through jobs._invalid
    assert raised, "the scan found no raise at all"
    assert raised <= registered
    assert registered <= raised | {"X_JOB_ROW_STATUS_UNKNOWN"}  # the readers' code, in Python


def test_the_vocabularies_match_the_database(client):
    def array(query):
        return client.connection.execute(query).fetchone()[0]

    assert [s.value for s in JobState] == array("select jobs.job_states()")
    assert {s.value for s in LIVE_STATES} == set(array("select jobs.live_states()"))
    assert [s.value for s in StepStatus] == array("select jobs.step_statuses()")
    assert {t.value for t in NackTarget} <= set(array("select jobs.job_states()"))


def _every_builder_with_every_argument():
    job, now = uuid4(), datetime.now(UTC)
    return [
        calls.version(),
        calls.enqueue(
            "n",
            {},
            "k",
            queue="q",
            tenant_id="t",
            run_at=now,
            max_attempts=3,
            priority=1,
            id=job,
            run_id=uuid4(),
            on_conflict="dedupe",
            traceparent="tp",
            enqueued_by="me",
        ),
        calls.enqueue_many([], on_conflict="error"),
        calls.claim(
            ["q"], "w", batch_size=2, visibility=timedelta(seconds=5), drop_exhausted=["n"]
        ),
        calls.ack(Fence(job, "w", 1)),
        calls.ack_many("w", [job], [1]),
        calls.nack(
            Fence(job, "w", 1),
            delay=timedelta(seconds=1),
            error="e",
            error_code="X_E",
            error_stack="s",
        ),
        calls.nack_many("w", []),
        calls.heartbeat(Fence(job, "w", 1), visibility=timedelta(seconds=5)),
        calls.record_step(
            Fence(job, "w", 1), "s", StepStatus.SLEEPING, output={"a": 1}, error="e", wake_at=now
        ),
        calls.steps(uuid4()),
        calls.queue_stats(["q"]),
        calls.pause_queue("q", paused_by="me"),
        calls.resume_queue("q"),
        calls.requeue(job, from_step="s"),
        calls.cancel(job, reason="r"),
        calls.outbox_stage(
            "n",
            {},
            "k",
            queue="q",
            tenant_id="t",
            run_at=now,
            max_attempts=3,
            priority=1,
            run_id=uuid4(),
            traceparent="tp",
            enqueued_by="me",
        ),
        calls.outbox_claim("r", batch_size=2, lease=timedelta(seconds=5)),
        calls.outbox_mark_published("r", [job]),
        calls.outbox_release("r", [job]),
        calls.outbox_relay("r", batch_size=2),
        calls.list_jobs(
            queue="q",
            name="n",
            state="ready",
            tenant_id="t",
            id_prefix="01",
            created_from=now,
            created_to=now,
            page_size=5,
            after=job,
        ),
        calls.list_jobs(before=job),
        calls.remove(job),
        calls.promote(job),
        calls.requeue_many("dead", queue="q", name="n", tenant_id="t"),
        calls.remove_many("dead"),
        calls.promote_many("delayed"),
        calls.publish_event("e", {"a": 1}, correlation_key="c", ttl=timedelta(days=1)),
        calls.find_event("e", correlation_key="c", after=now),
        calls.scheduler_arm("t", now),
        calls.scheduler_fire("t", now, [], watermark=now),
        calls.scheduler_lead("h", ttl=timedelta(seconds=30), name="scheduler"),
        calls.scheduler_resign("h", name="scheduler"),
        calls.pause_task("t"),
        calls.resume_task("t"),
        calls.task_fires(),
    ]


@pytest.mark.parametrize("call", _every_builder_with_every_argument(), ids=lambda c: c.function)
def test_every_builder_names_a_function_and_arguments_that_exist(client, call):
    schema, name = call.function.split(".")
    argument_lists = client.connection.execute(
        """select coalesce(p.proargnames, '{}')
             from pg_proc p
            where p.pronamespace = %s::regnamespace and p.proname = %s""",
        [schema, name],
    ).fetchall()
    assert len(argument_lists) == 1, f"{call.function} must exist exactly once (no overloads)"
    assert set(call.params) <= set(argument_lists[0][0])
