"""Batched settles: one statement for the acks (and one for the nacks) that arrive while another
is on the wire, each still fenced on its own claim and told whether it landed."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import durajobs
from durajobs._db.database import AsyncDatabase
from durajobs.errors import ArgumentInvalid
from durajobs.runtime.settler import Settler
from support.rows import fetch_all


def _claimed(database_url, count):
    with durajobs.Client.connect(database_url) as client:
        for n in range(count):
            client.enqueue("j", {}, f"k{n}")
        return client.claim(["default"], "w", batch_size=count)


def test_concurrent_acks_share_statements_and_each_learns_whether_it_landed(database_url):
    claimed = _claimed(database_url, 20)
    stale = claimed[0]

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            batcher = Settler(db, "w")
            answers = await asyncio.gather(
                batcher.ack(stale.id, stale.claim + 1),  # a superseded token: fenced
                *(batcher.ack(row.id, row.claim) for row in claimed[1:]),
            )
            return answers, batcher.statements

    answers, statements = asyncio.run(scenario())
    assert answers == [False] + [True] * 19
    # all twenty arrived before the first statement left: one statement carries them
    assert statements == 1
    with psycopg.connect(database_url, autocommit=True) as connection:
        states = dict(connection.execute("select state, count(*) from jobs.jobs group by 1"))
    assert states == {"running": 1, "done": 19}


@pytest.mark.parametrize("failures_in_a_row", [1, 2])
def test_a_failed_batch_is_tried_once_more_then_fails_every_ack_in_it(
    database_url, failures_in_a_row
):
    claimed = _claimed(database_url, 3)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            real_run = db.run
            failures = {"left": failures_in_a_row}

            async def flaky(call):
                if failures["left"]:
                    failures["left"] -= 1
                    raise psycopg.OperationalError("connection reset")
                return await real_run(call)

            db.run = flaky  # type: ignore[method-assign]
            batcher = Settler(db, "w")
            first = await asyncio.gather(
                *(batcher.ack(row.id, row.claim) for row in claimed[:2]), return_exceptions=True
            )
            second = await batcher.ack(claimed[2].id, claimed[2].claim)
            return first, second

    first, second = asyncio.run(scenario())
    if failures_in_a_row == 1:
        assert first == [True, True], "one failure is retried: the batch still lands"
    else:
        assert all(isinstance(answer, psycopg.OperationalError) for answer in first)
    assert second is True


@pytest.mark.parametrize("count", [1, 600])
def test_every_ack_is_answered_whatever_the_batch_size(database_url, count):
    claimed = _claimed(database_url, count)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            batcher = Settler(db, "w", max_batch=500)
            answers = await asyncio.gather(*(batcher.ack(row.id, row.claim) for row in claimed))
            return answers, batcher.statements

    answers, statements = asyncio.run(scenario())
    assert answers == [True] * count
    assert statements == -(-count // 500)  # never more than max_batch ids in one statement


def test_nacks_share_a_statement_and_each_keeps_its_own_options(database_url):
    claimed = _claimed(database_url, 3)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            settler = Settler(db, "w")
            answers = await asyncio.gather(
                settler.nack(claimed[0].id, claimed[0].claim, {"error": "boom"}),
                settler.nack(
                    claimed[1].id,
                    claimed[1].claim,
                    {"next_state": "ready", "counts_as_attempt": False},
                ),
                settler.nack(claimed[2].id, claimed[2].claim + 1, {"error": "stale"}),
            )
            return answers, settler.statements

    answers, statements = asyncio.run(scenario())
    assert answers == [True, True, False], "the superseded token is fenced out"
    assert statements == 1
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "select id, state, attempt, last_error from jobs.jobs where id = any(%s)",
            [[row.id for row in claimed]],
        ).fetchall()
    by_id = {row[0]: row[1:] for row in rows}
    assert by_id[claimed[0].id] == ("ready", 1, "boom")
    assert by_id[claimed[1].id] == ("ready", 0, None), "uncounted: the attempt is given back"
    assert by_id[claimed[2].id] == ("running", 1, None)


@pytest.mark.parametrize(
    "delay",
    [
        timedelta(microseconds=95),  # prints as 9.5e-05 seconds: once refused, the batch lost
        timedelta(seconds=1, microseconds=7),
        timedelta(days=400, seconds=3),
        timedelta(0),
    ],
)
def test_a_batched_nack_keeps_its_delay_to_the_microsecond(database_url, delay):
    [row] = _claimed(database_url, 1)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            return await Settler(db, "w").nack(
                row.id, row.claim, {"next_state": "suspended", "delay": delay}
            )

    assert asyncio.run(scenario()) is True
    with psycopg.connect(database_url, autocommit=True) as connection:
        [(state, after_update)] = connection.execute(
            "select state, run_at - updated_at from jobs.jobs where id = %s", [row.id]
        ).fetchall()
    assert (state, after_update) == ("suspended", delay)


def test_a_refused_batch_is_sent_again_one_settle_a_statement(database_url):
    claimed = _claimed(database_url, 3)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            settler = Settler(db, "w")
            answers = await asyncio.gather(
                settler.nack(claimed[0].id, claimed[0].claim, {"error": "boom"}),
                settler.nack(claimed[1].id, claimed[1].claim, {"next_state": "bogus"}),
                settler.nack(claimed[2].id, claimed[2].claim, {"error": "bang"}),
                return_exceptions=True,
            )
            return answers, settler.statements

    answers, statements = asyncio.run(scenario())
    assert (answers[0], answers[2]) == (True, True), "the others still land"
    assert isinstance(answers[1], ArgumentInvalid)
    assert "next_state" in str(answers[1])
    assert statements == 4, "the batch once, then each alone; a refusal is not retried"
    with psycopg.connect(database_url, autocommit=True) as connection:
        states = dict(
            connection.execute(
                "select id, state from jobs.jobs where id = any(%s)", [[r.id for r in claimed]]
            ).fetchall()
        )
    assert [states[row.id] for row in claimed] == ["ready", "running", "ready"]


def test_a_batch_refused_for_a_value_it_carries_is_split_too(database_url):
    """Not only an X_* code: a value jsonb refuses (here a NUL sent raw) fails the statement
    before any function runs, and must fail its own settle alone."""
    claimed = _claimed(database_url, 3)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            settler = Settler(db, "w")
            return await asyncio.gather(
                *(
                    settler.nack(row.id, row.claim, {"error": "a\x00b" if n == 1 else "ok"})
                    for n, row in enumerate(claimed)
                ),
                return_exceptions=True,
            )

    answers = asyncio.run(scenario())
    assert (answers[0], answers[2]) == (True, True)
    assert isinstance(answers[1], psycopg.DataError)


def test_a_day_of_delay_is_a_day_of_elapsed_time_across_a_dst_change(database_url):
    """Sent as days, now() plus a day would be a calendar day in the session's zone: 23 hours
    on the night the clocks go forward."""
    [row] = _claimed(database_url, 1)
    eve_of_dst = make_conninfo(
        database_url,
        options="-c TimeZone=America/New_York -c durajobs.now=2026-03-07T12:00:00-05:00",
    )

    async def scenario():
        async with AsyncDatabase(eve_of_dst) as db:
            return await Settler(db, "w").nack(
                row.id, row.claim, {"next_state": "suspended", "delay": timedelta(days=1)}
            )

    assert asyncio.run(scenario()) is True
    [(elapsed,)] = fetch_all(
        database_url,
        "select extract(epoch from run_at) - extract(epoch from updated_at) from jobs.jobs"
        " where id = %s",
        [row.id],
    )
    assert elapsed == 86_400


def test_settles_waiting_for_a_statement_are_counted_until_it_leaves(database_url):
    """A worker counts a queued settle as a taken slot: `queued` must fall to zero once the
    statement carrying it has left, and `on_sent` must say so."""
    claimed = _claimed(database_url, 4)

    async def scenario():
        async with AsyncDatabase(database_url) as db:
            sent: list[int] = []
            settler = Settler(db, "w", on_sent=lambda: sent.append(settler.queued))
            answers: list[bool] = []
            for row in claimed:
                settler.ack_soon(row.id, row.claim, lambda landed, _failure: answers.append(landed))
            queued_before = settler.queued
            while len(answers) < len(claimed):
                await asyncio.sleep(0.01)
            return queued_before, sent, settler.queued, answers

    queued_before, sent, queued_after, answers = asyncio.run(scenario())
    assert queued_before == 4
    assert sent == [0], "one statement took all four off the queue"
    assert queued_after == 0
    assert answers == [True] * 4
