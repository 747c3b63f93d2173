"""The fan-out example: resumable, duplicate-free, each child retrying alone, and the parent
parked until its children settle, then adding up their results (issue 21)."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime

import psycopg

import durajobs
from support.paths import REPOSITORY

sys.path.insert(0, str(REPOSITORY))

from examples.fanout import build

from durajobs.runtime.attempt import _Writer

OCCURRENCE = datetime(2026, 6, 2, 0, 0, tzinfo=UTC)


def _count(database_url, query):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(query).fetchone()[0]


def _seed(database_url, customers):
    registry = build(database_url)
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(
            "insert into customers select generate_series(1, %s) on conflict do nothing",
            [customers],
        )
    return registry


def _run_until(registry, database_url, done, timeout=60):
    worker = durajobs.Worker(registry, database_url, listen=False)

    async def scenario():
        runner = asyncio.ensure_future(worker.run())
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the fan-out did not finish"
            await asyncio.sleep(0.05)
        worker.stop()
        await runner

    asyncio.run(scenario())


def _billed(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        (result,) = connection.execute(
            "select result from jobs.jobs where name = 'invoice-fan-out'"
        ).fetchone()
    return result


def test_a_fan_out_killed_half_way_resumes_without_duplicates(database_url, monkeypatch):
    registry = _seed(database_url, 40)
    (task,) = registry.tasks()
    real_enqueue_children = _Writer.enqueue_children
    calls = {"made": 0}

    async def crashing_enqueue_children(self, name, requests):
        calls["made"] += 1
        if calls["made"] == 21:
            raise ConnectionError("the process died after 20 children")
        return await real_enqueue_children(self, name, requests)

    monkeypatch.setattr(_Writer, "enqueue_children", crashing_enqueue_children)
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, durajobs._db.calls.scheduler_arm(task.name, OCCURRENCE))
        durajobs.execute(
            connection,
            durajobs._db.calls.scheduler_fire(
                task.name, OCCURRENCE.replace(hour=1), task.requests(OCCURRENCE.replace(hour=1))
            ),
        )
    _run_until(
        registry,
        database_url,
        lambda: (
            _count(
                database_url,
                "select count(*) from jobs.jobs where name = 'invoice-fan-out' and state = 'done'",
            )
            == 1
        ),
    )
    # 20 children, a crash, then the replay enqueued only the other 20 (41 calls, not 60)
    assert calls["made"] == 41
    assert _count(database_url, "select count(*) from jobs.jobs where name = 'send-invoice'") == 40
    assert (
        _count(
            database_url,
            "select count(*) from jobs.jobs where name = 'send-invoice'"
            " and state = 'done' and parent_id is not null",
        )
        == 40
    )
    # one counted attempt (the crash); the parks for the children gave theirs back
    assert _count(database_url, "select attempt from jobs.jobs where name = 'invoice-fan-out'") == 2
    assert _billed(database_url) == {"invoices": 40, "cents": 40000, "failed": []}


def test_running_the_whole_fan_out_twice_leaves_one_child_per_row(database_url):
    registry = _seed(database_url, 40)
    fan_out = registry.get("invoice-fan-out")
    assert fan_out is not None
    first = fan_out.enqueue({"occurrence": OCCURRENCE.isoformat()})
    _run_until(
        registry,
        database_url,
        lambda: (
            _count(database_url, "select count(*) from jobs.jobs where state <> 'done'") == 0
            and _count(database_url, "select count(*) from jobs.jobs") == 41
        ),
    )
    # the whole fan-out run again (an operator's requeue keeps its run): every step replays
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("select jobs.requeue(%s)", [first.id])
    _run_until(
        registry,
        database_url,
        lambda: _count(database_url, "select count(*) from jobs.jobs where state <> 'done'") == 0,
    )
    assert _count(database_url, "select count(*) from jobs.jobs where name = 'send-invoice'") == 40
    assert _count(database_url, "select attempt from jobs.jobs where name = 'invoice-fan-out'") == 1
    # the replayed wait answered the stored outcomes: the same bill
    assert _billed(database_url) == {"invoices": 40, "cents": 40000, "failed": []}


def test_a_child_dead_for_good_is_reported_not_fatal(database_url):
    registry = _seed(database_url, 4)
    child = registry.get("send-invoice")
    assert child is not None
    real_handler = child.handler

    async def refuses_two(ctx):
        if ctx.input.customer_id == 2:
            raise RuntimeError("customer 2 has no address")
        return await real_handler(ctx)

    child.handler = refuses_two
    registry.get("invoice-fan-out").enqueue({"occurrence": OCCURRENCE.isoformat()})
    _run_until(
        registry,
        database_url,
        lambda: (
            _count(
                database_url,
                "select count(*) from jobs.jobs where name = 'invoice-fan-out' and state = 'done'",
            )
            == 1
        ),
    )
    assert _billed(database_url) == {"invoices": 3, "cents": 3000, "failed": [2]}
    assert (
        _count(database_url, "select count(*) from jobs.jobs where state = 'dead'") == 1
    )  # customer 2's invoice, after its 3 attempts


def test_one_failing_child_retries_alone(database_url):
    registry = _seed(database_url, 5)
    child = registry.get("send-invoice")
    assert child is not None
    real_handler = child.handler
    failed_once: list[int] = []

    async def flaky(ctx):
        if ctx.input.customer_id == 3 and not failed_once:
            failed_once.append(3)
            raise RuntimeError("the mail server hiccuped")
        return await real_handler(ctx)

    child.handler = flaky
    registry.get("invoice-fan-out").enqueue({"occurrence": OCCURRENCE.isoformat()})
    _run_until(
        registry,
        database_url,
        lambda: _count(database_url, "select count(*) from jobs.jobs where state = 'done'") == 6,
    )
    assert (
        _count(database_url, "select count(*) from jobs.jobs where attempt > 1") == 1
    )  # customer 3 only
    assert _count(database_url, "select attempt from jobs.jobs where name = 'invoice-fan-out'") == 1
    assert _billed(database_url) == {"invoices": 5, "cents": 5000, "failed": []}
