"""The outbox relay against real databases (spec §3.I items 99, 102-112; R11, R12, R15-R21).

'same database': the outbox and the queue share one database, and a pass is one call
(jobs.outbox_relay). 'two databases': the application's database holds the outbox, a second
migrated database holds the queue, and the relay claims, publishes and marks in separate calls.
Relays racing each other are concurrency/test_relay_races; the relay as a process,
processes/test_relay_processes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import timedelta
from uuid import UUID

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs.errors import Invariant, JobDuplicate
from durajobs.runtime.worker import Worker
from durajobs.services.relay import DEFAULT_CLAIM_LEASE, OutboxRelay
from support.dropped_cancel import CancelDropper, cancel_once_while_parked
from support.events import recorded
from support.outbox import (
    WHERE,
    counting_job,
    crash_once_before_the_mark,
    eventually,
    job_rows,
    outbox_rows,
    published_in,
    queue_database,
    record_publishes,
    relay_into,
    send_job,
    stage,
)
from support.rows import fetch_all
from support.running import run_until

# --- one pass ---------------------------------------------------------------------------------


def test_a_pass_in_one_database_publishes_in_staged_order(database_url):
    job = send_job(durajobs.Registry(database_url, outbox=True))
    staged = stage(database_url, job, ["a", "b", "c"])
    published = []

    async def scenario():
        relay = OutboxRelay(database_url, listen=False)
        assert relay.same_database
        record_publishes(relay, published)
        await relay.open()
        try:
            first = await relay.run_once()
            second = await relay.run_once()
        finally:
            await relay.close()
        return relay, first, second

    relay, first, second = asyncio.run(scenario())
    assert (first, second) == (3, 0)
    assert relay.published == 3
    assert [(i, a.id, a.run_id, a.deduped) for i, a in published] == [
        (s.id, s.id, s.run_id, False) for s in staged
    ]
    assert job_rows(database_url) == sorted((s.id, s.run_id) for s in staged)
    assert fetch_all(database_url, "select input from jobs.jobs order by id") == [
        ({"key": key, "note": ""},) for key in "abc"
    ]
    assert outbox_rows(database_url) == [(s.id, relay.relay_id, True, True) for s in staged]


def test_a_pass_relays_from_the_app_database_into_the_queue(database_url, queue_url):
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    staged = stage(database_url, job, ["a", "b", "c"])
    published = []

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False)
        assert not relay.same_database
        record_publishes(relay, published)
        await relay.open()
        try:
            return relay, await relay.run_once(), await relay.run_once()
        finally:
            await relay.close()

    relay, first, second = asyncio.run(scenario())
    assert (first, second) == (3, 0)
    assert [(i, a.id, a.run_id, a.deduped) for i, a in published] == [
        (s.id, s.id, s.run_id, False) for s in staged
    ]
    # the job lives only in the queue's database, under the staged ids
    assert job_rows(queue_url) == sorted((s.id, s.run_id) for s in staged)
    assert job_rows(database_url) == []
    assert fetch_all(queue_url, "select count(*) from jobs.outbox") == [(0,)]
    assert outbox_rows(database_url) == [(s.id, relay.relay_id, True, True) for s in staged]


def test_staged_rows_wait_for_a_relay_and_then_run(database_url, queue_url):
    """Items 99 and 102: committed then no relay (a crash, or none installed yet) leaves the rows
    staged; a relay started later delivers them and a worker runs each once."""
    ran: list[str] = []
    registry = durajobs.Registry(queue_url, outbox=True)

    async def handler(ctx):
        ran.append(ctx.input.key)

    job = send_job(registry, handler=handler)
    staged = stage(database_url, job, ["a", "b"])
    assert job_rows(queue_url) == []
    assert [published for *_, published in outbox_rows(database_url)] == [False, False]

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False, interval="20ms")
        relaying = asyncio.ensure_future(relay.run())
        try:
            worker = Worker(registry, queue_url, listen=False)
            await run_until(worker, lambda: len(ran) == 2)
        finally:
            relay.stop()
            await asyncio.wait_for(relaying, 30)

    asyncio.run(scenario())
    assert sorted(ran) == ["a", "b"]
    assert fetch_all(queue_url, "select id, state from jobs.jobs order by id") == [
        (s.id, "done") for s in staged
    ]


# --- R15 / item 105: a failed publish stops the batch ------------------------------------------


def test_a_failed_publish_stops_the_batch_and_releases_the_rest(database_url, queue_url, caplog):
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    a, b, c = stage(database_url, job, ["create-invoice", "charge-card", "send-receipt"])
    failing = {"id": b.id}
    order = []

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False)
        real = relay.target.run

        async def flaky(call):
            if call.function == "jobs.enqueue" and call.params["id"] == failing["id"]:
                raise psycopg.OperationalError("the queue blinked")
            answer = await real(call)
            if call.function == "jobs.enqueue":
                order.append(call.params["id"])
            return answer

        relay.target.run = flaky
        await relay.open()
        try:
            first = await relay.run_once()
            after_first = await asyncio.to_thread(outbox_rows, database_url)
            in_queue = await asyncio.to_thread(job_rows, queue_url)
            failing["id"] = None
            # at once: the lease is 30 s, so only a release makes rows 2-3 claimable now
            second = await relay.run_once()
            third = await relay.run_once()
        finally:
            await relay.close()
        return relay, first, after_first, in_queue, second, third

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        relay, first, after_first, in_queue, second, third = asyncio.run(scenario())
    assert first == 1
    assert in_queue == [(a.id, a.run_id)]
    assert after_first == [
        (a.id, relay.relay_id, True, True),
        (b.id, None, False, False),
        (c.id, None, False, False),
    ]
    failed = [r for r in caplog.records if r.getMessage() == "jobs.outbox.publish-failed"]
    assert [getattr(r, "id", None) for r in failed] == [str(b.id)]
    assert (second, third) == (2, 0)
    assert order == [a.id, b.id, c.id]
    assert job_rows(queue_url) == sorted((s.id, s.run_id) for s in (a, b, c))
    assert [published for *_, published in outbox_rows(database_url)] == [True, True, True]


def test_a_failed_publish_in_one_database_publishes_nothing_of_its_batch(database_url):
    """The one-call pass is one transaction: a publish that raises takes back the whole batch,
    so nothing overtakes it and every row stays claimable."""
    job = send_job(durajobs.Registry(database_url, outbox=True))
    a, b, c = stage(database_url, job, ["a", "b", "c"])
    # poison row b: its id already names a different job, which jobs.enqueue always refuses
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.enqueue("squatter", {}, "elsewhere", id=b.id))

    async def scenario():
        relay = OutboxRelay(database_url, listen=False)
        await relay.open()
        try:
            with pytest.raises(JobDuplicate):
                await relay.run_once()
            stopped = await asyncio.to_thread(outbox_rows, database_url)
            await asyncio.to_thread(
                fetch_all, database_url, "delete from jobs.jobs where id = %s returning id", [b.id]
            )
            return stopped, await relay.run_once()
        finally:
            await relay.close()

    stopped, moved = asyncio.run(scenario())
    assert stopped == [(s.id, None, False, False) for s in (a, b, c)]
    assert moved == 3
    assert job_rows(database_url) == sorted((s.id, s.run_id) for s in (a, b, c))


@pytest.mark.parametrize("where", WHERE)
def test_rows_staged_within_one_millisecond_publish_in_staging_order(
    database_url, make_empty_database, where
):
    """R14 and docs/transactions.md ("rows staged in one transaction keep their order"):
    rows of one transaction share staged_at, and the ids of one millisecond are random after
    their timestamp, so (staged_at, id) alone would publish the later row first."""
    queue_url = queue_database(where, database_url, make_empty_database)
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    with psycopg.connect(database_url) as connection:
        staged = [job.enqueue({"key": f"k{n}"}, using=connection) for n in range(5)]
        # make the ids sort opposite to the staging order, as two stages of one millisecond can
        reversed_ids = [UUID(f"01900000-0000-7000-8000-{99 - n:012d}") for n in range(5)]
        for row, new_id in zip(staged, reversed_ids, strict=True):
            connection.execute("update jobs.outbox set id = %s where id = %s", [new_id, row.id])
    staged = [
        type(row)(new_id, row.run_id, row.deduped)
        for row, new_id in zip(staged, reversed_ids, strict=True)
    ]
    assert sorted(s.id for s in staged) == [s.id for s in reversed(staged)]
    published = []

    async def scenario():
        relay = relay_into(database_url, queue_url, listen=False, batch_size=1000)
        record_publishes(relay, published)
        await relay.open()
        try:
            return await relay.run_once()
        finally:
            await relay.close()

    assert asyncio.run(scenario()) == len(staged)
    assert [a.id for _, a in published] == [s.id for s in staged]


# --- R16 / item 106: a crash between publish and mark --------------------------------------------


def test_a_republish_after_the_job_finished_runs_nothing_again(database_url, queue_url):
    ran: list[str] = []
    registry, job = counting_job(queue_url, ran)
    (staged,) = stage(database_url, job, ["a"])
    published = []

    async def scenario():
        relay = OutboxRelay(
            database_url, queue_url, claim_lease="200ms", listen=False, relay_id="relay:crashy"
        )
        crash_once_before_the_mark(relay)
        record_publishes(relay, published)
        await relay.open()
        try:
            with pytest.raises(RuntimeError):
                await relay.run_once()
            # the job runs and finishes before anyone re-publishes it
            await run_until(Worker(registry, queue_url, listen=False), lambda: ran == ["a"])
            await eventually(
                lambda: asyncio.to_thread(
                    lambda: fetch_all(queue_url, "select state from jobs.jobs") == [("done",)]
                ),
                what="the job settling",
            )
            # the same relay, after its own lease lapsed, publishes the row again
            await eventually(relay.run_once, what="the re-publish")
        finally:
            await relay.close()
        # a later job proves the worker looked: the finished one is not run again
        await asyncio.to_thread(job.enqueue, {"key": "sentinel"})
        await run_until(Worker(registry, queue_url, listen=False), lambda: "sentinel" in ran)

    asyncio.run(scenario())
    assert [(i, a.id, a.run_id, a.deduped) for i, a in published] == [
        (staged.id, staged.id, staged.run_id, False),
        (staged.id, staged.id, staged.run_id, True),
    ]
    assert ran == ["a", "sentinel"]
    assert fetch_all(queue_url, "select state from jobs.jobs where id = %s", [staged.id]) == [
        ("done",)
    ]
    assert fetch_all(queue_url, "select count(*) from jobs.jobs") == [(2,)]
    assert outbox_rows(database_url) == [(staged.id, "relay:crashy", True, True)]


# --- R18 / item 108: a staged duplicate --------------------------------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_a_staged_duplicate_of_a_live_key_creates_no_row(database_url, make_empty_database, where):
    queue_url = queue_database(where, database_url, make_empty_database)
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    live = job.enqueue({"key": "dup", "note": "live"})  # no transaction: published directly
    before = fetch_all(queue_url, "select * from jobs.jobs")
    with psycopg.connect(database_url) as connection:
        staged = job.enqueue({"key": "dup", "note": "staged"}, using=connection)
    assert staged.deduped is False  # known only at publish
    assert staged.id != live.id
    published = []

    async def scenario():
        relay = relay_into(database_url, queue_url, listen=False)
        record_publishes(relay, published)
        await relay.open()
        try:
            return await relay.run_once()
        finally:
            await relay.close()

    assert asyncio.run(scenario()) == 1
    # the live job's ids answer the publish; nothing names the staged ids
    assert [(a.id, a.run_id, a.deduped) for _, a in published] == [(live.id, live.run_id, True)]
    assert fetch_all(queue_url, "select count(*) from jobs.jobs where id = %s", [staged.id]) == [
        (0,)
    ]
    assert fetch_all(queue_url, "select * from jobs.jobs") == before
    assert [published for *_, published in outbox_rows(database_url)] == [True]


# --- R19 / item 110: stop joins the pass in flight ---------------------------------------------


def _slow_publishes(relay: OutboxRelay, events: list[str], *, seconds: float) -> asyncio.Event:
    """Make each of `relay`'s publishes take `seconds` longer and note it in `events`; answer
    an event set when the first one begins."""
    publishing = asyncio.Event()
    real_run = relay.target.run

    async def slow_publish(call):
        if call.function == "jobs.enqueue":
            publishing.set()
            await asyncio.sleep(seconds)
            answer = await real_run(call)
            events.append(f"published {call.params['id']}")
            return answer
        return await real_run(call)

    relay.target.run = slow_publish
    return publishing


def test_stop_during_a_slow_publish_returns_after_the_mark(database_url, queue_url, caplog):
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    a, b = stage(database_url, job, ["a", "b"])
    events: list[str] = []

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False, interval="50ms")
        publishing = _slow_publishes(relay, events, seconds=0.5)
        real_mark = relay.mark_published

        async def mark_published(ids):
            marked = await real_mark(ids)
            events.append(f"marked {sorted(marked)}")
            return marked

        relay.mark_published = mark_published
        runner = asyncio.ensure_future(relay.run())
        await asyncio.wait_for(publishing.wait(), 10)
        relay.stop()
        events.append("stop called")
        await asyncio.wait_for(runner, 20)
        events.append("run returned")
        return relay

    with caplog.at_level(logging.WARNING, logger="durajobs"):
        relay = asyncio.run(scenario())
    assert events == [
        "stop called",
        f"published {a.id}",
        f"published {b.id}",
        f"marked {sorted([a.id, b.id])}",
        "run returned",
    ]
    assert relay.source.pool.closed
    assert relay.target.pool.closed
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert outbox_rows(database_url) == [(s.id, relay.relay_id, True, True) for s in (a, b)]
    assert job_rows(queue_url) == sorted((s.id, s.run_id) for s in (a, b))


@pytest.mark.parametrize("deadlines", [("10s", "300ms"), ("300ms", "10s")])
def test_stop_with_a_deadline_abandons_a_pass_that_outlives_it(
    database_url, queue_url, caplog, deadlines
):
    """Item 110: stop(deadline) binds when it is called and the earliest deadline wins; the
    abandoned pass's rows are published by the next relay, each once."""
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    staged = stage(database_url, job, ["a", "b"])
    events: list[str] = []
    lease = "1s"  # the abandoned rows come back to the next relay after it

    async def scenario() -> float:
        relay = OutboxRelay(
            database_url, queue_url, listen=False, interval="50ms", claim_lease=lease
        )
        publishing = _slow_publishes(relay, events, seconds=5.0)
        runner = asyncio.ensure_future(relay.run())
        await asyncio.wait_for(publishing.wait(), 10)
        began = time.monotonic()
        for deadline in deadlines:
            relay.stop(deadline=deadline)
        await asyncio.wait_for(runner, 20)
        return time.monotonic() - began

    with caplog.at_level(logging.WARNING, logger="durajobs"):
        took = asyncio.run(scenario())
    assert took < 3.0, "the earlier deadline, 300 ms, bounded the wait, not the 5 s publish"
    assert "jobs.outbox.stop-abandoned" in [r.getMessage() for r in caplog.records]
    assert not events, "the slow publish was cut before it answered"

    async def next_relay() -> None:
        relay = OutboxRelay(database_url, queue_url, listen=False, interval="50ms")
        await run_until_published(relay)

    async def run_until_published(relay: OutboxRelay) -> None:
        runner = asyncio.ensure_future(relay.run())
        await eventually(
            lambda: len(job_rows(queue_url)) == 2, timeout=15, what="the rows re-published"
        )
        relay.stop()
        await runner

    asyncio.run(next_relay())
    assert job_rows(queue_url) == sorted((s.id, s.run_id) for s in staged), "each row once"


def test_a_cancel_the_opening_dropped_still_stops_the_relay(database_url):
    # opening waits on the pool, which can drop a cancel: the relay polled on as if never asked
    relay = OutboxRelay(database_url, listen=False, interval="20ms")
    dropper = CancelDropper()
    relay.open = dropper.ahead_of(relay.open)  # type: ignore[method-assign]

    ended, cancelled = cancel_once_while_parked(relay.run, dropper)
    assert dropper.dropped
    assert ended, "the relay polled on after its one cancel was dropped"
    assert cancelled
    assert relay.source.pool.closed


# --- R20 / item 111: a pass that raises re-arms the loop ---------------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_a_pass_that_raises_is_logged_and_the_loop_rearms(
    database_url, make_empty_database, caplog, where
):
    queue_url = queue_database(where, database_url, make_empty_database)
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    (first,) = stage(database_url, job, ["first"])

    async def scenario():
        relay = relay_into(
            database_url, queue_url, listen=False, interval="20ms", idle_ceiling="100ms"
        )
        real = relay.source.run
        failures = {"left": 1}

        async def flaky(call):
            if call.function in ("jobs.outbox_relay", "jobs.outbox_claim") and failures["left"]:
                failures["left"] -= 1
                raise psycopg.OperationalError("the pool blinked")
            return await real(call)

        relay.source.run = flaky
        runner = asyncio.ensure_future(relay.run())
        try:
            await eventually(published_in(database_url, [first.id]), what="the first row")
            (later,) = await asyncio.to_thread(stage, database_url, job, ["later"])
            await eventually(published_in(database_url, [later.id]), what="a later row")
        finally:
            relay.stop()
            await asyncio.wait_for(runner, 20)
        return relay, later, failures["left"]

    with caplog.at_level(logging.ERROR, logger="durajobs"):
        relay, later, left = asyncio.run(scenario())
    assert left == 0
    failed = [r for r in caplog.records if r.getMessage() == "jobs.outbox.tick-failed"]
    assert len(failed) == 1
    assert getattr(failed[0], "relay", None) == relay.relay_id
    assert "the pool blinked" in getattr(failed[0], "error", "")
    assert job_rows(queue_url) == sorted([(first.id, first.run_id), (later.id, later.run_id)])


# --- R21 / item 109: the claim lease ------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        0,
        "0ms",
        -1,
        timedelta(0),
        timedelta(microseconds=1500),  # a fractional millisecond
        "1.5ms",
        0.0005,
        math.inf,
        math.nan,
        "soon",
        True,
        None,
        timedelta(days=1, milliseconds=1),  # past the SQL claim's bound
    ],
    ids=repr,
)
def test_an_impossible_claim_lease_is_refused_at_construction(database_url, bad):
    with pytest.raises(Invariant) as refused:
        OutboxRelay(database_url, claim_lease=bad)
    assert refused.value.code == "X_INVARIANT"
    assert refused.value.detail == {"field": "claim_lease"}


@pytest.mark.parametrize(
    ("given", "lease"),
    [
        (1.5, timedelta(milliseconds=1500)),  # seconds: a whole number of milliseconds
        ("200ms", timedelta(milliseconds=200)),
        (timedelta(milliseconds=1), timedelta(milliseconds=1)),
        ("1d", timedelta(days=1)),
    ],
)
def test_a_whole_millisecond_claim_lease_is_kept(database_url, given, lease):
    async def construct():
        return OutboxRelay(database_url, claim_lease=given).claim_lease

    assert asyncio.run(construct()) == lease


def test_the_claim_lease_defaults_to_thirty_seconds(database_url):
    async def construct():
        return OutboxRelay(database_url).claim_lease

    assert asyncio.run(construct()) == timedelta(seconds=30) == DEFAULT_CLAIM_LEASE


def test_a_cross_database_pass_claims_under_the_configured_lease(database_url, queue_url):
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    stage(database_url, job, ["a"])

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, claim_lease="90s", listen=False)
        await relay.open()
        try:
            return await relay.run_once()
        finally:
            await relay.close()

    assert asyncio.run(scenario()) == 1
    # the claim stamped its expiry; the mark, a moment later, its publish time
    (leased,) = fetch_all(
        database_url,
        "select extract(epoch from claim_expires_at - published_at) from jobs.outbox",
    )[0]
    assert 80 < leased <= 90


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_an_impossible_batch_size_is_refused_at_construction(database_url, bad):
    with pytest.raises(Invariant):
        OutboxRelay(database_url, batch_size=bad)


# --- the outbox wake (item 112) ----------------------------------------------------------------


@pytest.mark.parametrize("where", WHERE)
def test_a_committed_stage_wakes_an_idle_relay(database_url, make_empty_database, where):
    queue_url = queue_database(where, database_url, make_empty_database)
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    passes: list[float] = []

    async def scenario():
        # only the wake can publish within the test's bound: the poll waits 30 s and more
        relay = relay_into(
            database_url,
            queue_url,
            listen=True,
            interval=timedelta(seconds=30),
            idle_ceiling=timedelta(minutes=1),
        )
        real_run_once = relay.run_once

        async def counted():
            passes.append(time.monotonic())
            return await real_run_once()

        relay.run_once = counted
        runner = asyncio.ensure_future(relay.run())
        try:
            await eventually(
                _async(lambda: relay._wake is not None and relay._wake.proven and bool(passes)),
                what="the relay's listener proving itself",
            )
            idle_passes = len(passes)
            connection = await psycopg.AsyncConnection.connect(database_url)
            try:
                staged = await job.enqueue_async({"key": "a"}, using=connection)
                # an open transaction: its notification waits for the commit
                await asyncio.sleep(0.3)
                assert len(passes) == idle_passes
                committed = time.monotonic()
                await connection.commit()
            finally:
                await connection.close()
            await eventually(published_in(database_url, [staged.id]), timeout=10, what="the wake")
            latency = time.monotonic() - committed
        finally:
            relay.stop()
            await asyncio.wait_for(runner, 20)
        return staged, latency

    staged, latency = asyncio.run(scenario())
    assert latency < 5.0, "the relay was not woken: it waited for its poll"
    assert job_rows(queue_url) == [(staged.id, staged.run_id)]


def _async(check):
    async def checked():
        return check()

    return checked


def test_a_stage_notifies_once_and_not_while_a_row_waits(database_url):
    job = send_job(durajobs.Registry(database_url, outbox=True))
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(calls.listen(calls.OUTBOX_WAKE_CHANNEL))
        stage(database_url, job, [f"k{n}" for n in range(5)])
        heard = list(listener.notifies(timeout=2, stop_after=5))
        assert [(n.channel, n.payload) for n in heard] == [("jobs_outbox_wake", "")]
        # committed, unclaimed rows wait: their relay is already on the way, so silence
        stage(database_url, job, ["k5"])
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []

        async def relay_all():
            relay = OutboxRelay(database_url, listen=False)
            await relay.open()
            try:
                return await relay.run_once()
            finally:
                await relay.close()

        assert asyncio.run(relay_all()) == 6
        # nothing waits any more: the next stage wakes the relay again
        stage(database_url, job, ["k6"])
        heard = list(listener.notifies(timeout=2, stop_after=1))
        assert [n.channel for n in heard] == ["jobs_outbox_wake"]


def test_an_idle_relay_backs_off_to_its_ceiling(database_url):
    relay = OutboxRelay(
        database_url,
        listen=False,
        interval=timedelta(milliseconds=10),
        idle_ceiling=timedelta(milliseconds=80),
    )

    async def scenario():
        runner = asyncio.ensure_future(relay.run())
        await eventually(lambda: len(idle) >= 6, every=0.01, what="six idle waits")
        relay.stop()
        await runner

    with recorded("durajobs.services.relay", "jobs.outbox.idle") as idle:
        asyncio.run(scenario())
    assert [event["wait"] for event in idle[:6]] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]


def test_a_second_cancel_does_not_cut_the_pass_in_flight(database_url, queue_url):
    # the first cancel stops the loop; a second one (an impatient supervisor) used to cancel
    # the pass mid-publish, leaving its rows held for the claim lease and published again
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    a, b = stage(database_url, job, ["a", "b"])
    events: list[str] = []

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False, interval="50ms")
        publishing = _slow_publishes(relay, events, seconds=0.3)
        runner = asyncio.ensure_future(relay.run())
        async with asyncio.timeout(10):
            await publishing.wait()
        runner.cancel()
        # the first cancel has landed once run() is in its shielded teardown
        await eventually(lambda: relay._closing is not None, what="the relay's teardown")
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        async with asyncio.timeout(10):
            while not (relay.source.pool.closed and relay.target.pool.closed):
                await asyncio.sleep(0.05)
        return relay

    relay = asyncio.run(scenario())
    assert events == [f"published {a.id}", f"published {b.id}"]
    assert outbox_rows(database_url) == [(s.id, relay.relay_id, True, True) for s in (a, b)]


def test_a_target_that_cannot_open_closes_the_source_again(database_url, empty_database_url):
    relay = OutboxRelay(database_url, empty_database_url, listen=False)

    async def scenario():
        with pytest.raises(durajobs.DurajobsError):
            await relay.run()

    asyncio.run(scenario())
    assert relay.source.pool.closed


# --- a pass's lease, and inputs passed through as stored ----------------------------------------


def test_a_pass_longer_than_its_lease_marks_what_it_published_and_goes_on(database_url, queue_url):
    """Ten publishes of 0.1 s under a 0.5 s lease: a pass that published all ten would mark
    none (its lease gone), and every pass after it would publish the same rows again."""
    job = send_job(durajobs.Registry(queue_url, outbox=True))
    staged = stage(database_url, job, [f"k{n}" for n in range(10)])
    publishes: list[str] = []

    async def scenario():
        relay = OutboxRelay(
            database_url, queue_url, listen=False, batch_size=10, claim_lease="500ms"
        )
        _slow_publishes(relay, publishes, seconds=0.1)
        runner = asyncio.ensure_future(relay.run())
        try:
            await eventually(
                lambda: all(published for *_, published in outbox_rows(database_url)),
                timeout=15,
                what="every row marked",
            )
        finally:
            relay.stop()
            await runner

    asyncio.run(scenario())
    assert job_rows(queue_url) == sorted((s.id, s.run_id) for s in staged)
    # each row published once: every pass marked what it published before its lease ran out
    assert sorted(publishes) == sorted(f"published {s.id}" for s in staged)


def test_an_input_crosses_to_the_queue_with_its_numbers_exact(database_url, queue_url):
    exact = '{"key": "k", "amount": 12345678901234567.89, "big": 123456789012345678901234567890}'
    fetch_all(
        database_url,
        "select jobs.outbox_stage(name => 'raw', input => %s::jsonb, idempotency_key => 'k')",
        [exact],
    )

    async def scenario():
        relay = OutboxRelay(database_url, queue_url, listen=False)
        await relay.open()
        try:
            return await relay.run_once()
        finally:
            await relay.close()

    assert asyncio.run(scenario()) == 1
    [(same,)] = fetch_all(
        queue_url, "select input = %s::jsonb from jobs.jobs where name = 'raw'", [exact]
    )
    assert same is True
