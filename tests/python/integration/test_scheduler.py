"""Cron tasks against a real database with a controllable clock: catch-up, the fire fence, one
node's leadership (what a declaration refuses and the cron maths are unit/test_cron; several
nodes, concurrency/test_scheduler_races)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import durajobs
from durajobs._db import calls
from durajobs._values.durations import DeclarationInvalid
from durajobs.services.scheduler import Scheduler
from support.dropped_cancel import CancelDropper, cancel_once_while_parked
from support.factory import declare
from support.scheduling import (
    START,
    Clock,
    Report,
    report_app,
    reports,
    set_watermark,
    ticks,
)

# -- catch-up -------------------------------------------------------------------------------------


def test_skip_fires_the_true_latest_missed_occurrence_once(database_url):
    registry = report_app(database_url, catch_up="skip")
    set_watermark(database_url, "hourly", START - timedelta(hours=3))
    clock = Clock(START + timedelta(minutes=20))
    scheduler = Scheduler(registry, database_url, clock=clock)
    assert asyncio.run(ticks(scheduler, clock, count=3)) == [1, 0, 0]
    assert reports(database_url) == ["2026-06-01T12:00:00+00:00"]
    # the next fire is the next real occurrence
    clock.now = START + timedelta(hours=1, seconds=1)
    assert asyncio.run(ticks(scheduler, clock)) == [1]
    assert reports(database_url)[-1] == "2026-06-01T13:00:00+00:00"


def test_skip_after_a_year_finds_the_latest_occurrence_directly(database_url):
    """R54: the true latest of a */5 cron after a year down, without walking the gap."""
    registry = report_app(database_url, catch_up="skip", cron="*/5 * * * *")
    set_watermark(database_url, "hourly", START - timedelta(days=365))
    clock = Clock(START + timedelta(minutes=7))
    assert asyncio.run(ticks(Scheduler(registry, database_url, clock=clock), clock)) == [1]
    assert reports(database_url) == ["2026-06-01T12:05:00+00:00"]


def test_skip_finds_the_latest_occurrence_without_walking_the_gap(database_url, monkeypatch):
    """R54: about 35 cron evaluations for a year, not one per missed occurrence."""
    import croniter as croniter_module

    evaluations = {"count": 0}
    real_next, real_prev = croniter_module.croniter.get_next, croniter_module.croniter.get_prev

    def counted_next(self, *args, **kwargs):
        evaluations["count"] += 1
        return real_next(self, *args, **kwargs)

    def counted_prev(self, *args, **kwargs):
        evaluations["count"] += 1
        return real_prev(self, *args, **kwargs)

    monkeypatch.setattr(croniter_module.croniter, "get_next", counted_next)
    monkeypatch.setattr(croniter_module.croniter, "get_prev", counted_prev)
    registry = report_app(database_url, catch_up="skip", cron="*/5 * * * *")
    (task,) = registry.tasks()
    fires = task.due(START - timedelta(days=365), START + timedelta(minutes=7))
    assert fires == [(START + timedelta(minutes=5), START + timedelta(minutes=5))]
    assert evaluations["count"] <= 40  # a year of */5 is 105,120 occurrences


def test_run_once_fires_the_earliest_missed_once_and_passes_the_rest(database_url):
    """R49: a day down used to fire 24 catch-ups a second apart."""
    registry = report_app(database_url, catch_up="run-once")
    set_watermark(database_url, "hourly", START - timedelta(hours=24, minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    assert asyncio.run(ticks(Scheduler(registry, database_url, clock=clock), clock, count=5)) == [
        1,
        0,
        0,
        0,
        0,
    ]
    assert reports(database_url) == ["2026-05-31T12:00:00+00:00"]
    with psycopg.connect(database_url, autocommit=True) as connection:
        watermark = connection.execute("select watermark from jobs.scheduler_tasks").fetchone()[0]
    assert watermark == START  # every missed occurrence was passed in the same call


def test_run_all_fires_each_missed_occurrence_bounded_per_round(database_url):
    registry = report_app(database_url, catch_up="run-all", max_catch_up=10)
    set_watermark(database_url, "hourly", START - timedelta(hours=25))
    clock = Clock(START + timedelta(minutes=1))
    fired = asyncio.run(ticks(Scheduler(registry, database_url, clock=clock), clock, count=4))
    assert fired == [10, 10, 5, 0]
    assert len(reports(database_url)) == 25


def test_a_new_task_does_not_catch_up_on_its_past(database_url):
    registry = report_app(database_url, catch_up="run-all")
    clock = Clock(START + timedelta(minutes=30))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    assert asyncio.run(ticks(node, clock)) == [0]
    clock.now = START + timedelta(hours=1)
    assert asyncio.run(ticks(node, clock)) == [1]


def test_a_restart_catches_up_from_the_stored_watermark(database_url):
    """R52: the watermark survives a redeploy; the missed latest occurrence fires."""
    registry = report_app(database_url)
    clock = Clock(START + timedelta(seconds=1))
    first = Scheduler(registry, database_url, clock=clock, holder="node")
    asyncio.run(ticks(first, clock))  # arms at 12:00:01, nothing owed
    clock.now = START + timedelta(hours=2, minutes=5)  # down for two hours
    second = Scheduler(registry, database_url, clock=clock, holder="node")  # the same node, back
    assert asyncio.run(ticks(second, clock)) == [1]
    assert reports(database_url) == ["2026-06-01T14:00:00+00:00"]


# -- the fire fence -------------------------------------------------------------------------------


def test_a_second_fire_of_one_occurrence_enqueues_nothing(database_url):
    """R50: fire and watermark move together; a repeat is a no-op."""
    requests = [{"name": "report", "input": {"at": "x"}, "idempotency_key": "x"}]
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.scheduler_arm("t", START - timedelta(hours=1)))
        first = durajobs.execute(connection, calls.scheduler_fire("t", START, requests))
        again = durajobs.execute(connection, calls.scheduler_fire("t", START, requests))
        fires = durajobs.execute(connection, calls.task_fires())
    assert len(first) == 1
    assert again == []
    assert len(reports(database_url)) == 1
    assert (fires[0].task, fires[0].last_fired_occurrence) == ("t", START)


def test_a_scheduled_fire_and_a_manual_fire_are_two_jobs(database_url):
    registry = report_app(database_url)
    (task,) = registry.tasks()
    manual = task.enqueue()
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.scheduler_arm("hourly", START - timedelta(hours=1)))
        scheduled = durajobs.execute(
            connection, calls.scheduler_fire("hourly", START, task.requests(START))
        )
        keys = [
            row[0]
            for row in connection.execute(
                "select idempotency_key from jobs.jobs order by created_at"
            ).fetchall()
        ]
    assert len(manual) == 1
    assert len(scheduled) == 1
    assert keys[1].startswith("hourly@2026-06-01T12:00:00Z:")
    assert keys[0] != keys[1]


# paused over the 12:00, 13:00 and 14:00 occurrences, resumed at 14:01: what each policy owes
PAUSED_OVER = [
    ("skip", ["2026-06-01T14:00:00+00:00"]),
    ("run-once", ["2026-06-01T12:00:00+00:00"]),
    (
        "run-all",
        ["2026-06-01T12:00:00+00:00", "2026-06-01T13:00:00+00:00", "2026-06-01T14:00:00+00:00"],
    ),
]


@pytest.mark.parametrize(("catch_up", "owed"), PAUSED_OVER)
def test_a_paused_task_keeps_its_watermark_and_its_policy_decides_on_resume(
    database_url, catch_up, owed
):
    registry = report_app(database_url, catch_up=catch_up)
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START - timedelta(minutes=15))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    asyncio.run(ticks(node, clock))  # leading, the watermark read and kept; nothing owed yet
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("select jobs.pause_task('hourly')")
    # each occurrence falls due while it is paused; the first fire meets the pause in the
    # database (the leader still holds the watermark it read), the rest are not asked for
    for hour in (0, 1, 2):
        clock.now = START + timedelta(hours=hour, minutes=1)
        assert asyncio.run(ticks(node, clock, count=2)) == [0, 0]
    assert reports(database_url) == []
    with psycopg.connect(database_url, autocommit=True) as connection:
        watermark = connection.execute(
            "select watermark from jobs.scheduler_tasks where task = 'hourly'"
        ).fetchone()[0]
        connection.execute("select jobs.resume_task('hourly')")
    assert watermark == START - timedelta(minutes=30), "a paused task keeps its watermark"
    clock.now = START + timedelta(hours=2, minutes=1)
    asyncio.run(ticks(node, clock, count=3))
    assert reports(database_url) == owed
    # and then it runs on as before: the next occurrence fires once
    clock.now = START + timedelta(hours=3, minutes=1)
    asyncio.run(ticks(node, clock, count=2))
    assert reports(database_url) == [*owed, "2026-06-01T15:00:00+00:00"]


def test_a_broken_task_does_not_stop_the_others(database_url, caplog):
    import logging

    registry = report_app(database_url)
    registry.task(name="a-broken", cron="0 * * * *", tz="UTC")(
        lambda occurrence: [(registry.get("report"), {"at": 5})]  # the job refuses this input
    )
    for task in ("a-broken", "hourly"):
        set_watermark(database_url, task, START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        fired = asyncio.run(ticks(Scheduler(registry, database_url, clock=clock), clock))
    assert fired == [1]  # 'hourly', after the broken task in name order, still fired
    assert reports(database_url) == ["2026-06-01T12:00:00+00:00"]
    assert any(r.getMessage() == "jobs.scheduler.task-failed" for r in caplog.records)


def test_an_enqueue_function_that_answers_an_awaitable_is_refused(database_url):
    registry = report_app(database_url)

    async def coroutine():
        return []

    task = registry.task(name="sneaky", cron="0 * * * *", tz="UTC")(lambda o: coroutine())
    with pytest.raises(DeclarationInvalid):
        task.requests(START)


# -- leading, alone -------------------------------------------------------------------------------


def test_a_demoted_node_stops_mid_round(database_url):
    """R98: still_leading() is asked before every fire."""
    registry = report_app(database_url, tasks=3)
    for n in range(3):
        set_watermark(database_url, f"hourly-{n}", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    real_run = node.db.run

    async def lease_runs_out_after_first_fire(call):
        answer = await real_run(call)
        if call.function == "jobs.scheduler_fire":
            clock.now += timedelta(minutes=5)  # the round stalled past the lease
        return answer

    node.db.run = lease_runs_out_after_first_fire  # type: ignore[method-assign]
    assert asyncio.run(ticks(node, clock)) == [1]
    assert len(reports(database_url)) == 1


def test_an_idle_minute_costs_seven_statements_whatever_the_tasks(database_url):
    """R53: watermarks live in memory while leading; only the lease is renewed, and the
    counters are rolled up once."""
    registry = report_app(database_url, tasks=35)
    clock = Clock(START + timedelta(seconds=1))
    node = Scheduler(registry, database_url, clock=clock, holder="idle")
    statements: list[str] = []
    real_run = node.db.run

    async def counting(call):
        statements.append(call.function)
        return await real_run(call)

    node.db.run = counting  # type: ignore[method-assign]
    asyncio.run(ticks(node, clock, count=1))  # the first round arms the 35 tasks
    armed = len(statements)
    asyncio.run(ticks(node, clock, count=60))  # one idle minute, a tick a second
    idle = statements[armed:]
    assert sorted(idle) == ["jobs.rollup_counters"] + ["jobs.scheduler_lead"] * 6


def test_concurrent_ticks_join_the_round_in_flight(database_url):
    """J123: three tick_once calls at once make one round: one lease renewal, one arm and one
    fire, and each call answers that round's fires."""
    registry = report_app(database_url, catch_up="run-once")
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="joined")
    statements: list[str] = []
    real_run = node.db.run

    async def counting(call):
        statements.append(call.function)
        await asyncio.sleep(0.01)  # the others arrive while this round is on the wire
        return await real_run(call)

    node.db.run = counting  # type: ignore[method-assign]

    async def scenario() -> list[int]:
        await node.db.open()
        try:
            return list(await asyncio.gather(*(node.tick_once() for _ in range(3))))
        finally:
            await node.db.close()

    assert asyncio.run(scenario()) == [1, 1, 1]
    assert statements.count("jobs.scheduler_lead") == 1
    assert statements.count("jobs.scheduler_arm") == 1
    assert statements.count("jobs.scheduler_fire") == 1
    assert reports(database_url) == [START.isoformat()]
    assert node.fired == 1


def test_a_leader_whose_lease_ran_out_reads_the_watermarks_again(database_url):
    """Another node may have fired while this one stalled: its memory is stale."""
    registry = report_app(database_url, catch_up="run-once")
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START - timedelta(minutes=10))
    node = Scheduler(registry, database_url, clock=clock, holder="stalled")
    statements: list[str] = []
    real_run = node.db.run

    async def counting(call):
        statements.append(call.function)
        return await real_run(call)

    node.db.run = counting  # type: ignore[method-assign]

    async def scenario():
        await node.db.open()
        try:
            await node.tick_once()  # leads, caches the watermark 11:30
            statements.clear()
            # it stalls; meanwhile another node fires 12:00 and the lease lapses
            with psycopg.connect(database_url, autocommit=True) as connection:
                connection.execute(
                    "update jobs.scheduler_tasks set watermark = %s where task = 'hourly'",
                    [START],
                )
            clock.now = START + timedelta(minutes=40)
            return await node.tick_once(), node._watermarks["hourly"]
        finally:
            await node.db.close()

    fired, watermark = asyncio.run(scenario())
    assert fired == 0
    assert watermark == START
    # it read the watermark again instead of firing 12:00 from its stale memory (then, leading
    # again after more than a minute, it ran the counters' rollup)
    assert statements == ["jobs.scheduler_lead", "jobs.scheduler_arm", "jobs.rollup_counters"]


def test_an_abandoned_round_keeps_the_lease(database_url):
    """R55: releasing it would let a standby fire while the round may still be dispatching."""
    registry = report_app(database_url)
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    node = Scheduler(
        registry, database_url, clock=Clock(START + timedelta(minutes=1)), holder="abandoned"
    )
    real_run = node.db.run
    firing = asyncio.Event()

    async def hanging_fire(call):
        if call.function == "jobs.scheduler_fire":
            firing.set()
            await asyncio.Event().wait()
        return await real_run(call)

    node.db.run = hanging_fire  # type: ignore[method-assign]

    async def scenario():
        running = asyncio.ensure_future(node.run())
        async with asyncio.timeout(10):
            await firing.wait()  # mid-round: its fire is on the wire
        assert node.leading
        running.cancel()  # the drain deadline passed mid-round
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(scenario())
    with psycopg.connect(database_url, autocommit=True) as connection:
        holders = connection.execute("select holder from jobs.scheduler_leases").fetchall()
    assert holders == [("abandoned",)]


def test_a_cancel_a_round_dropped_still_stops_the_scheduler(database_url):
    # a round waits for pooled connections, whose wait can drop a cancel: the scheduler ticked on
    registry = report_app(database_url)
    node = Scheduler(registry, database_url, clock=Clock(START), holder="dropped", tick="50ms")
    dropper = CancelDropper()
    node.tick_once = dropper.ahead_of(node.tick_once)  # type: ignore[method-assign]

    ended, cancelled = cancel_once_while_parked(node.run, dropper)
    assert dropper.dropped
    assert ended, "the scheduler ticked on after its one cancel was dropped"
    assert cancelled


# -- daylight saving ------------------------------------------------------------------------------


def test_a_scheduler_across_the_spring_switch_fires_the_moved_occurrence(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @declare(registry, "report", input=Report, idempotency_key=lambda r: r.at)
    async def report(ctx):
        return None

    registry.task(name="night", cron="30 2 * * *", tz="America/New_York")(
        lambda occurrence: [(report, {"at": occurrence.isoformat()})]
    )
    (task,) = registry.tasks()
    switch_day = datetime(2026, 3, 8, 7, 5, tzinfo=UTC)  # 03:05 EDT, just after the gap
    assert task.latest_at_or_before(switch_day) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    set_watermark(database_url, "night", datetime(2026, 3, 7, 7, 30, tzinfo=UTC))
    clock = Clock(switch_day)
    assert asyncio.run(ticks(Scheduler(registry, database_url, clock=clock), clock)) == [1]
    assert reports(database_url) == ["2026-03-08T07:00:00+00:00"]  # 03:00 EDT, once


def _demotions(records: list[logging.LogRecord]) -> list[str]:
    return [r.reason for r in records if r.msg == "jobs.scheduler.demoted"]  # type: ignore[attr-defined]


def test_a_leader_whose_lease_ran_out_on_its_own_clock_logs_its_demotion(database_url, caplog):
    """A stalled leader that another node replaced says so, as one that lost a renewal does."""
    registry = report_app(database_url)
    clock = Clock(START)
    node = Scheduler(registry, database_url, clock=clock, holder="stalled", renew_every=10)
    asyncio.run(ticks(node, clock))
    assert node.leading
    with psycopg.connect(database_url, autocommit=True) as connection:
        # the node stalled past its lease, and another node took it
        connection.execute("update jobs.scheduler_leases set expires_at = now() - interval '1 s'")
        connection.execute("select jobs.scheduler_lead(holder => 'standby')")
    clock.now += timedelta(minutes=5)
    with caplog.at_level(logging.INFO, logger="durajobs.services.scheduler"):
        asyncio.run(ticks(node, clock))
    assert not node.leading
    assert _demotions(caplog.records) == ["lapsed"]


def test_a_leader_that_meets_another_holder_at_its_renewal_logs_taken(database_url, caplog):
    registry = report_app(database_url)
    clock = Clock(START)
    node = Scheduler(registry, database_url, clock=clock, holder="leader", renew_every=10)
    asyncio.run(ticks(node, clock))
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("update jobs.scheduler_leases set expires_at = now() - interval '1 s'")
        connection.execute("select jobs.scheduler_lead(holder => 'other')")
    clock.now += timedelta(seconds=11)  # the renewal is due; the local lease still runs
    with caplog.at_level(logging.INFO, logger="durajobs.services.scheduler"):
        asyncio.run(ticks(node, clock))
    assert not node.leading
    assert _demotions(caplog.records) == ["taken"]


# -- drain ----------------------------------------------------------------------------------------


def _fire_waits_on_a_lock(database_url: str) -> bool:
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute(
            "select count(*) from pg_stat_activity"
            " where wait_event_type = 'Lock' and query like '%scheduler_fire%'"
        ).fetchone()
    return bool(row and row[0])


def _lease_holder(database_url: str) -> str | None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        row = connection.execute("select holder from jobs.scheduler_leases").fetchone()
    return None if row is None else str(row[0])


def test_a_drain_past_its_deadline_abandons_the_round_and_keeps_the_lease(database_url, caplog):
    registry = report_app(database_url)
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="slow-node", tick=0.05)
    # a transaction holding the task's row: the round's fire waits for it (a slow enqueue)
    blocker = psycopg.connect(database_url)
    blocker.execute("select 1 from jobs.scheduler_tasks where task = 'hourly' for update")

    async def scenario() -> bool:
        running = asyncio.ensure_future(node.run())
        deadline = time.monotonic() + 10
        while not _fire_waits_on_a_lock(database_url):
            assert time.monotonic() < deadline, "the round never reached its fire"
            await asyncio.sleep(0.05)
        return await node.drain(running, 0.3)

    try:
        with caplog.at_level(logging.WARNING, logger="durajobs"):
            finished = asyncio.run(scenario())
        held_by = _lease_holder(database_url)
    finally:
        blocker.rollback()
        blocker.close()
    assert finished is False
    assert any(r.getMessage() == "jobs.scheduler.drain-abandoned" for r in caplog.records)
    # kept: a standby must not fire beside a dispatch that may still land
    assert held_by == "slow-node"


def test_a_drain_within_its_deadline_finishes_the_round_and_gives_the_lease_up(
    database_url, caplog
):
    registry = report_app(database_url)
    set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="quick-node", tick=0.05)

    async def scenario() -> bool:
        running = asyncio.ensure_future(node.run())
        deadline = time.monotonic() + 10
        while node.fired == 0:
            assert time.monotonic() < deadline, "the round never fired"
            await asyncio.sleep(0.02)
        return await node.drain(running, 10.0)

    with caplog.at_level(logging.WARNING, logger="durajobs"):
        finished = asyncio.run(scenario())
    assert finished is True
    assert not any(r.getMessage() == "jobs.scheduler.drain-abandoned" for r in caplog.records)
    assert reports(database_url) == ["2026-06-01T12:00:00+00:00"]
    assert _lease_holder(database_url) is None
