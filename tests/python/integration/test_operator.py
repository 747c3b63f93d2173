"""The operator functions from Python: keyset pages, remove, promote, bulk calls (a bulk call
racing a claim is concurrency/test_bulk_requeue_race)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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
