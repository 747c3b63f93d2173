"""Outbox relays racing each other (R11, R12, R16): two relays drain one outbox publishing each row
once, a relay that died between publish and mark is taken over once its lease lapses, and a
lapsed relay's late mark and release change nothing."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs.runtime.worker import Worker
from durajobs.services.relay import OutboxRelay
from support.outbox import (
    WHERE,
    counting_job,
    crash_once_before_the_mark,
    eventually,
    job_rows,
    outbox_rows,
    queue_database,
    record_publishes,
    relay_into,
    send_job,
    stage,
)
from support.rows import fetch_all
from support.running import run_until


@pytest.mark.parametrize("where", WHERE)
def test_two_relays_publish_each_of_a_thousand_rows_once(database_url, make_empty_database, where):
    queue_url = queue_database(where, database_url, make_empty_database)
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    # one transaction per row, so staging order is (staged_at) order whatever the ids; rows of
    # one transaction are test_rows_staged_within_one_millisecond_publish_in_staging_order's
    with psycopg.connect(database_url, autocommit=True) as connection:
        staged = [job.enqueue({"key": f"k{n}"}, using=connection) for n in range(1000)]
    assert len(staged) == 1000

    async def drain(relay):
        # both keep contending until every row is out, whoever publishes it
        deadline = time.monotonic() + 60
        while await relay.run_once() or not await _all_published():
            assert time.monotonic() < deadline, "the relays did not drain the outbox in time"
            await asyncio.sleep(0.005)

    async def _all_published():
        left = await asyncio.to_thread(
            fetch_all, database_url, "select count(*) from jobs.outbox where published_at is null"
        )
        return left == [(0,)]

    async def scenario():
        relays = [
            relay_into(database_url, queue_url, batch_size=50, listen=False) for _ in range(2)
        ]
        published: list[list] = [[], []]
        for relay, seen in zip(relays, published, strict=True):
            record_publishes(relay, seen)
        for relay in relays:
            await relay.open()
        try:
            await asyncio.gather(*(drain(relay) for relay in relays))
        finally:
            for relay in relays:
                await relay.close()
        return relays, published

    relays, published = asyncio.run(scenario())
    every = [staged_id for seen in published for staged_id, _ in seen]
    assert len(every) == 1000
    assert len(set(every)) == 1000, "a row was published twice"
    assert set(every) == {s.id for s in staged}
    assert sum(relay.published for relay in relays) == 1000
    assert not [a for seen in published for _, a in seen if a.deduped]
    # each relay published in staging order
    order = {s.id: n for n, s in enumerate(staged)}
    for seen in published:
        positions = [order[staged_id] for staged_id, _ in seen]
        assert positions == sorted(positions)
    assert fetch_all(queue_url, "select count(*), count(distinct id) from jobs.jobs") == [
        (1000, 1000)
    ]
    assert {row[0] for row in job_rows(queue_url)} == {s.id for s in staged}
    assert fetch_all(
        database_url, "select count(*) from jobs.outbox where published_at is not null"
    ) == [(1000,)]


def test_a_republish_after_a_crash_meets_the_live_job(database_url, queue_url):
    ran: list[str] = []
    registry, job = counting_job(queue_url, ran)
    (staged,) = stage(database_url, job, ["a"])
    published = []

    async def relay_twice():
        crashed = OutboxRelay(
            database_url, queue_url, claim_lease="200ms", listen=False, relay_id="relay:crashed"
        )
        survivor = OutboxRelay(database_url, queue_url, listen=False, relay_id="relay:survivor")
        crash_once_before_the_mark(crashed)
        record_publishes(crashed, published)
        record_publishes(survivor, published)
        await crashed.open()
        await survivor.open()
        try:
            with pytest.raises(RuntimeError, match="between the publish and the mark"):
                await crashed.run_once()
            left = await asyncio.to_thread(outbox_rows, database_url)
            # once the dead relay's lease lapses another relay takes the row and publishes again
            await eventually(survivor.run_once, what="the survivor re-publishing")
            return left
        finally:
            await crashed.close()
            await survivor.close()

    left = asyncio.run(relay_twice())
    assert left == [(staged.id, "relay:crashed", True, False)]
    assert [(i, a.id, a.run_id, a.deduped) for i, a in published] == [
        (staged.id, staged.id, staged.run_id, False),
        (staged.id, staged.id, staged.run_id, True),
    ]
    assert job_rows(queue_url) == [(staged.id, staged.run_id)]
    assert outbox_rows(database_url) == [(staged.id, "relay:survivor", True, True)]

    worker = Worker(registry, queue_url, listen=False)
    asyncio.run(
        run_until(
            worker,
            lambda: fetch_all(queue_url, "select state from jobs.jobs") == [("done",)],
        )
    )
    assert ran == ["a"]
    assert fetch_all(queue_url, "select count(*), max(attempt) from jobs.jobs") == [(1, 1)]


def test_a_lapsed_relays_late_mark_and_release_are_no_ops(database_url, queue_url):
    """R12 / item 104: marks and releases are fenced on the claimant's live lease."""
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    (staged,) = stage(database_url, job, ["a"])

    async def scenario():
        slow = OutboxRelay(
            database_url, queue_url, claim_lease="200ms", listen=False, relay_id="relay:slow"
        )
        fast = OutboxRelay(database_url, queue_url, listen=False, relay_id="relay:fast")
        await slow.open()
        await fast.open()
        try:
            claimed = await slow.source.run(
                calls.outbox_claim(slow.relay_id, lease=slow.claim_lease)
            )
            assert [row.id for row in claimed] == [staged.id]
            assert claimed[0].claimed_by == "relay:slow"
            taken = await eventually(
                lambda: fast.source.run(calls.outbox_claim(fast.relay_id)),
                what="the lease lapsing",
            )
            assert [row.id for row in taken] == [staged.id]
            late_mark = await slow.mark_published([staged.id])
            late_release = await slow.source.run(calls.outbox_release(slow.relay_id, [staged.id]))
            state = await asyncio.to_thread(outbox_rows, database_url)
            return late_mark, late_release, state, await fast.mark_published([staged.id])
        finally:
            await slow.close()
            await fast.close()

    late_mark, late_release, state, mark = asyncio.run(scenario())
    assert (late_mark, late_release) == ([], 0)
    assert state == [(staged.id, "relay:fast", True, False)]
    assert mark == [staged.id]
