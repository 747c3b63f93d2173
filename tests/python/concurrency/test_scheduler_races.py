"""Several scheduler nodes on one database: one leader, a fire fenced against a second node,
a dead leader replaced once its lease lapses, standbys that only ask for the lease."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg

import durajobs
from durajobs._db import calls
from durajobs.services.scheduler import Scheduler
from support.scheduling import START, Clock, report_app, reports, run_sql, set_watermark


def test_two_nodes_firing_one_occurrence_at_once_make_one_set_of_jobs(database_url, connect):
    requests = [{"name": "report", "input": {"at": "x"}, "idempotency_key": "x"}]
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.scheduler_arm("t", START - timedelta(hours=1)))
    a, b = psycopg.connect(database_url), psycopg.connect(database_url)
    try:
        first = durajobs.execute(a, calls.scheduler_fire("t", START, requests))  # uncommitted
        import threading

        answers: list[object] = []
        racer = threading.Thread(
            target=lambda: answers.append(
                durajobs.execute(b, calls.scheduler_fire("t", START, requests))
            )
        )
        racer.start()  # blocks on the task row
        a.commit()
        racer.join(timeout=10)
        b.commit()
    finally:
        a.close()
        b.close()
    assert len(first) == 1
    assert answers == [[]]
    assert len(reports(database_url)) == 1


def test_two_schedulers_elect_one_leader_and_only_it_fires(database_url):
    """R51: a lease row, not a session advisory lock, so a pool cannot make both lead."""
    registry = report_app(database_url)
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    a = Scheduler(registry, database_url, clock=clock, holder="a")
    b = Scheduler(registry, database_url, clock=clock, holder="b")

    async def scenario():
        await a.db.open()
        await b.db.open()
        try:
            fired = [await a.tick_once(), await b.tick_once(), await a.tick_once()]
            return fired, a.leading, b.leading
        finally:
            await a.db.close()
            await b.db.close()

    fired, a_leads, b_leads = asyncio.run(scenario())
    assert (a_leads, b_leads) == (True, False)
    assert fired == [1, 0, 0]
    assert len(reports(database_url)) == 1


def test_a_leader_killed_mid_round_is_replaced_without_a_double_fire(database_url):
    """A leader that died (no resign) is replaced once its lease lapses; the new leader fires
    what is owed and nothing the dead one already fired."""
    registry = report_app(database_url, tasks=2)
    for task in ("hourly-0", "hourly-1"):
        set_watermark(database_url, task, START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    dead = Scheduler(registry, database_url, clock=clock, holder="dead")
    heir = Scheduler(registry, database_url, clock=clock, holder="heir")

    async def scenario():
        await dead.db.open()
        await heir.db.open()
        try:
            # the leader fires task 0, then dies before task 1: simulate with its lease lost
            await dead._renew(clock.now)
            requests = registry.tasks()[0].requests(START)
            await dead.db.run(calls.scheduler_fire("hourly-0", START, requests))
            standby = await heir.tick_once()  # the lease is still the dead node's
            clock.now += timedelta(seconds=31)  # its lease lapses (on the database's clock too)
            await asyncio.to_thread(
                run_sql,
                database_url,
                "update jobs.scheduler_leases set expires_at = now() - interval '1 second'",
            )
            taken = await heir.tick_once()
            return standby, taken, heir.leading
        finally:
            await dead.db.close()
            await heir.db.close()

    standby, taken, leads = asyncio.run(scenario())
    assert (standby, leads) == (0, True)
    assert taken == 1  # task 1 only: task 0's occurrence was fired already
    assert len(reports(database_url)) == 2


def test_a_standby_asks_for_the_lease_at_the_renewal_interval_only(database_url):
    registry = report_app(database_url)
    clock = Clock(START + timedelta(seconds=1))
    leader = Scheduler(registry, database_url, clock=clock, holder="leader")
    standby = Scheduler(registry, database_url, clock=clock, holder="standby")
    statements: list[str] = []
    real_run = standby.db.run

    async def counting(call):
        statements.append(call.function)
        return await real_run(call)

    standby.db.run = counting  # type: ignore[method-assign]

    async def scenario():
        await leader.db.open()
        await standby.db.open()
        try:
            for _ in range(60):  # one minute, a tick a second, the leader renewing as it goes
                await leader.tick_once()
                await standby.tick_once()
                clock.now += timedelta(seconds=1)
        finally:
            await leader.db.close()
            await standby.db.close()

    asyncio.run(scenario())
    assert statements == ["jobs.scheduler_lead"] * 6
    assert not standby.leading


def test_the_leader_runs_maintenance_once_a_minute_and_standbys_never(database_url):
    registry = report_app(database_url)
    clock = Clock(START + timedelta(seconds=1))
    chores: list[str] = []

    def chore_of(holder):
        async def chore(db):
            chores.append(holder)

        return chore

    leader = Scheduler(
        registry, database_url, clock=clock, holder="leader", maintenance=[chore_of("leader")]
    )
    standby = Scheduler(
        registry, database_url, clock=clock, holder="standby", maintenance=[chore_of("standby")]
    )

    async def scenario():
        await leader.db.open()
        await standby.db.open()
        try:
            for _ in range(150):  # two and a half minutes
                await leader.tick_once()
                await standby.tick_once()
                clock.now += timedelta(seconds=1)
        finally:
            await leader.db.close()
            await standby.db.close()

    asyncio.run(scenario())
    assert chores == ["leader"] * 3  # at 0:00, 1:00 and 2:00


def test_two_schedulers_on_one_pool_still_elect_one_leader(database_url):
    """R51: a session-scoped advisory lock would let both lead through one pool."""
    registry = report_app(database_url)
    clock = Clock(START + timedelta(seconds=1))
    a = Scheduler(registry, database_url, clock=clock, holder="a")
    b = Scheduler(registry, database_url, clock=clock, holder="b")
    b.db = a.db  # the same pool, the same sessions

    async def scenario():
        await a.db.open()
        try:
            seen = []
            for _ in range(35):  # past three renewal intervals
                await a.tick_once()
                await b.tick_once()
                seen.append((a.leading, b.leading))
                clock.now += timedelta(seconds=1)
            return seen
        finally:
            await a.db.close()

    assert set(asyncio.run(scenario())) == {(True, False)}
