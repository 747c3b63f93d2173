"""The live and history tables (revision 0007): a row ends by moving, and every reader and writer
still sees one job. What the purge drops by the day, and the view's write-through, are pgTAP's
190_purge and 000_schema."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

import psycopg

import durajobs
from durajobs._values.states import StepStatus
from support.rows import fetch_all


def _where(database_url: str, job_id: UUID) -> list[tuple[Any, ...]]:
    """Which table holds the job, and in which state: [(table, state)], one row if all is well."""
    return fetch_all(
        database_url,
        "select 'live', state from jobs.jobs_live where id = %s"
        " union all select 'history', state from jobs.jobs_history where id = %s",
        (job_id, job_id),
    )


def _run_to_done(client: durajobs.Client, name: str, key: str, *, step: bool = False) -> UUID:
    enqueued = client.enqueue(name, {"key": key}, key, queue="q-hist")
    [claimed] = client.claim(["q-hist"], "w-hist", batch_size=1)
    assert claimed.id == enqueued.id
    if step:
        client.record_step(claimed.fence, "s1", StepStatus.COMPLETED, output={"n": 1})
    assert client.ack(claimed.fence)
    return enqueued.id


def test_a_row_ends_by_moving_to_the_history_and_comes_back_on_requeue(client, database_url):
    job_id = _run_to_done(client, "hist", "k-move", step=True)
    assert _where(database_url, job_id) == [("history", "done")]
    assert fetch_all(database_url, "select count(*) from jobs.jobs_live") == [(0,)]

    assert client.requeue(job_id)
    assert _where(database_url, job_id) == [("live", "ready")]
    [again] = client.claim(["q-hist"], "w-hist", batch_size=1)
    assert again.id == job_id
    assert again.has_steps, "the run kept its steps through the move"
    assert [s.name for s in client.steps(again.run_id)] == ["s1"]


def test_dedupe_holds_over_live_rows_only(client, database_url):
    first = client.enqueue("hist", {}, "k-dedupe", queue="q-hist")
    again = client.enqueue("hist", {}, "k-dedupe", queue="q-hist")
    assert (again.deduped, again.id) == (True, first.id), "a live row holds its key"
    [claimed] = client.claim(["q-hist"], "w-hist", batch_size=1)
    assert client.ack(claimed.fence)

    fresh = client.enqueue("hist", {}, "k-dedupe", queue="q-hist")
    assert not fresh.deduped, "a finished job holds no key"
    assert fresh.id != first.id
    assert _where(database_url, first.id) == [("history", "done")]
    assert _where(database_url, fresh.id) == [("live", "ready")]


def test_a_given_id_of_a_finished_job_answers_that_job(client, database_url):
    job_id = _run_to_done(client, "hist", "k-given")
    answer = client.enqueue("hist", {"key": "k-given"}, "k-given", queue="q-hist", id=job_id)
    assert (answer.deduped, answer.id) == (True, job_id)
    assert _where(database_url, job_id) == [("history", "done")], "no second row"

    [many] = client.enqueue_many(
        [{"name": "hist", "input": {}, "idempotency_key": "k-given", "id": str(job_id)}]
    )
    assert (many.deduped, many.id) == (True, job_id)
    assert _where(database_url, job_id) == [("history", "done")]


def test_an_enqueue_of_an_id_whose_row_is_ending_meets_it_in_the_history(
    client, database_url, connect
):
    """Two sessions: an ack moves the row and has not committed; an enqueue of the same id
    waits on the live primary key, then must find the row in the history rather than insert a
    second job under that id."""
    enqueued = client.enqueue("hist", {}, "k-race", queue="q-hist")
    [claimed] = client.claim(["q-hist"], "w-hist", batch_size=1)

    acking = connect()
    acking.autocommit = False
    assert acking.execute(
        "select jobs.ack_v1(%s, %s, %s)", [claimed.id, "w-hist", claimed.claim]
    ).fetchone() == (True,)

    answers: list[Any] = []
    enqueuing = connect()
    thread = threading.Thread(
        target=lambda: answers.append(
            enqueuing.execute(
                "select id, deduped from jobs.enqueue(name => 'hist', input => '{}',"
                " idempotency_key => 'k-race', id => %s)",
                [enqueued.id],
            ).fetchone()
        )
    )
    thread.start()
    _wait_for_lock(database_url, enqueuing.info.backend_pid)
    acking.commit()
    thread.join(timeout=30)

    assert answers == [(enqueued.id, True)]
    assert _where(database_url, enqueued.id) == [("history", "done")]


def test_cancel_of_a_running_row_moves_it_and_its_worker_sees_the_cancel(client, database_url):
    client.enqueue("hist", {}, "k-cancel", queue="q-hist")
    [claimed] = client.claim(["q-hist"], "w-hist", batch_size=1)
    assert client.cancel(claimed.id, reason="stop")
    assert _where(database_url, claimed.id) == [("history", "cancelled")]
    assert client.heartbeat(claimed.fence).value == "cancelled"
    assert not client.ack(claimed.fence), "the cancelled attempt's ack lands nothing"


def test_the_listing_reads_both_tables_in_one_order(client):
    done = _run_to_done(client, "hist", "k-list-1")
    waiting = client.enqueue("hist", {}, "k-list-2", queue="q-hist").id
    page = client.list_jobs(queue="q-hist")
    assert [(j.id, j.state.value) for j in page] == [(waiting, "ready"), (done, "done")]
    older = client.list_jobs(queue="q-hist", after=waiting)
    assert [j.id for j in older] == [done]


def test_the_upgrade_moves_every_finished_row_and_the_downgrade_brings_them_back(
    make_empty_database,
):
    url = make_empty_database()
    durajobs.migrate(url, "0006")
    with psycopg.connect(url, autocommit=True) as connection:
        for key in ("a", "b", "c", "d"):
            connection.execute(
                "select jobs.enqueue(name => 'up', input => '{}', idempotency_key => %s)", [key]
            )
        claimed = connection.execute(
            "select id, claim from jobs.claim_v1(array['default'], 'w-up', batch_size => 3)"
        ).fetchall()
        connection.execute("select jobs.ack_v1(%s, 'w-up', %s)", claimed[0])
        connection.execute(
            "select jobs.nack_v1(%s, 'w-up', %s, next_state => 'dead', error => 'x')", claimed[1]
        )
        before = connection.execute(
            "select id, state, finished_at, claims, last_error from jobs.jobs order by id"
        ).fetchall()
    assert sorted(row[1] for row in before) == ["dead", "done", "ready", "running"]

    durajobs.migrate(url)
    after = fetch_all(
        url, "select id, state, finished_at, claims, last_error from jobs.jobs order by id"
    )
    assert after == before, "every stored job kept, column for column"
    assert fetch_all(url, "select state from jobs.jobs_history order by state") == [
        ("dead",),
        ("done",),
    ]
    assert fetch_all(url, "select state from jobs.jobs_live order by state") == [
        ("ready",),
        ("running",),
    ]

    durajobs.downgrade(url, "0006")
    assert (
        fetch_all(
            url, "select id, state, finished_at, claims, last_error from jobs.jobs order by id"
        )
        == before
    )


def _wait_for_lock(database_url: str, pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        [(wait_type,)] = fetch_all(
            database_url, "select wait_event_type from pg_stat_activity where pid = %s", (pid,)
        )
        if wait_type == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError("the enqueue never waited for the ack's row")
