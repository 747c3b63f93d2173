"""Batched acks: one statement for the acks that arrive while another is on the wire, each ack
still fenced on its own claim and told whether it landed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import durajobs
from durajobs._db.database import AsyncDatabase
from durajobs.runtime.acks import AckBatcher


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
            batcher = AckBatcher(db, "w")
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
            batcher = AckBatcher(db, "w")
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
            batcher = AckBatcher(db, "w", max_batch=500)
            answers = await asyncio.gather(*(batcher.ack(row.id, row.claim) for row in claimed))
            return answers, batcher.statements

    answers, statements = asyncio.run(scenario())
    assert answers == [True] * count
    assert statements == -(-count // 500)  # never more than max_batch ids in one statement
