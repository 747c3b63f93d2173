"""Cron tasks against a real database with a controllable clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from pydantic import BaseModel

import durajobs
from dropped_cancel import CancelDropper, cancel_once_while_parked
from durajobs._db import calls
from durajobs._values.durations import DeclarationInvalid
from durajobs.services.scheduler import Scheduler

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Report(BaseModel):
    at: str


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _app(database_url, *, catch_up="skip", max_catch_up=10, cron="0 * * * *", tasks=1):
    registry = durajobs.Registry(database_url=database_url)

    @registry.job(name="report", input=Report, idempotency_key=lambda r: r.at, tenant="none")
    async def report(ctx):
        return None

    for n in range(tasks):
        registry.task(
            name=f"hourly-{n}" if tasks > 1 else "hourly",
            cron=cron,
            tz="UTC",
            catch_up=catch_up,
            max_catch_up=max_catch_up,
        )(lambda occurrence: [(report, {"at": occurrence.isoformat()})])
    return registry


def _jobs(database_url):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return [
            row[0]
            for row in connection.execute(
                "select input ->> 'at' from jobs.jobs order by input ->> 'at'"
            ).fetchall()
        ]


def _run_sql(database_url, query):
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute(query)


def _set_watermark(database_url, task, watermark):
    with psycopg.connect(database_url, autocommit=True) as connection:
        durajobs.execute(connection, calls.scheduler_arm(task, watermark))
        connection.execute(
            "update jobs.scheduler_tasks set watermark = %s where task = %s", [watermark, task]
        )


async def _ticks(scheduler, clock, count=1, step=timedelta(seconds=1)):
    await scheduler.db.open()
    try:
        fired = []
        for _ in range(count):
            fired.append(await scheduler.tick_once())
            clock.now += step
        return fired
    finally:
        await scheduler.db.close()


# -- declarations ---------------------------------------------------------------------------------


def test_a_city_alone_is_refused_and_the_zone_suggested():
    """R29: 'Bogota' would have run in UTC, five hours off, forever."""
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid, match="America/Bogota") as refused:
        registry.task(name="t", cron="0 9 * * *", tz="Bogota")
    assert "America/Bogota" in refused.value.detail["suggestions"]
    registry.task(name="t", cron="0 9 * * *", tz="America/Bogota")(lambda occurrence: [])


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan"), float("inf"), True])
def test_an_impossible_max_catch_up_is_refused(bad):
    """R28: 0, negative or fractional meant the task never fired, with no error."""
    with pytest.raises(DeclarationInvalid):
        durajobs.Registry().task(
            name="t", cron="* * * * *", tz="UTC", catch_up="run-all", max_catch_up=bad
        )


def test_the_declaration_refuses_what_cannot_work():
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid):
        registry.task(name="t", cron="61 * * * *", tz="UTC")
    with pytest.raises(DeclarationInvalid):
        registry.task(name="t", cron="* * * * *", tz="UTC", catch_up="sometimes")  # type: ignore[arg-type]
    declare = registry.task(name="t", cron="* * * * *", tz="UTC")

    async def does_io(occurrence):
        return []

    with pytest.raises(DeclarationInvalid):
        declare(does_io)
    declare(lambda occurrence: [])
    with pytest.raises(durajobs.errors.JobDuplicate):
        registry.task(name="t", cron="* * * * *", tz="UTC")(lambda occurrence: [])
    assert registry.tasks()[0].max_catch_up == 10


# -- catch-up -------------------------------------------------------------------------------------


def test_skip_fires_the_true_latest_missed_occurrence_once(database_url):
    registry = _app(database_url, catch_up="skip")
    _set_watermark(database_url, "hourly", START - timedelta(hours=3))
    clock = Clock(START + timedelta(minutes=20))
    scheduler = Scheduler(registry, database_url, clock=clock)
    assert asyncio.run(_ticks(scheduler, clock, count=3)) == [1, 0, 0]
    assert _jobs(database_url) == ["2026-06-01T12:00:00+00:00"]
    # the next fire is the next real occurrence
    clock.now = START + timedelta(hours=1, seconds=1)
    assert asyncio.run(_ticks(scheduler, clock)) == [1]
    assert _jobs(database_url)[-1] == "2026-06-01T13:00:00+00:00"


def test_skip_after_a_year_finds_the_latest_occurrence_directly(database_url):
    """R54: the true latest of a */5 cron after a year down, without walking the gap."""
    registry = _app(database_url, catch_up="skip", cron="*/5 * * * *")
    _set_watermark(database_url, "hourly", START - timedelta(days=365))
    clock = Clock(START + timedelta(minutes=7))
    assert asyncio.run(_ticks(Scheduler(registry, database_url, clock=clock), clock)) == [1]
    assert _jobs(database_url) == ["2026-06-01T12:05:00+00:00"]


def test_run_once_fires_the_earliest_missed_once_and_passes_the_rest(database_url):
    """R49: a day down used to fire 24 catch-ups a second apart."""
    registry = _app(database_url, catch_up="run-once")
    _set_watermark(database_url, "hourly", START - timedelta(hours=24, minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    assert asyncio.run(_ticks(Scheduler(registry, database_url, clock=clock), clock, count=5)) == [
        1,
        0,
        0,
        0,
        0,
    ]
    assert _jobs(database_url) == ["2026-05-31T12:00:00+00:00"]
    with psycopg.connect(database_url, autocommit=True) as connection:
        watermark = connection.execute("select watermark from jobs.scheduler_tasks").fetchone()[0]
    assert watermark == START  # every missed occurrence was passed in the same call


def test_run_all_fires_each_missed_occurrence_bounded_per_round(database_url):
    registry = _app(database_url, catch_up="run-all", max_catch_up=10)
    _set_watermark(database_url, "hourly", START - timedelta(hours=25))
    clock = Clock(START + timedelta(minutes=1))
    fired = asyncio.run(_ticks(Scheduler(registry, database_url, clock=clock), clock, count=4))
    assert fired == [10, 10, 5, 0]
    assert len(_jobs(database_url)) == 25


def test_a_new_task_does_not_catch_up_on_its_past(database_url):
    registry = _app(database_url, catch_up="run-all")
    clock = Clock(START + timedelta(minutes=30))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    assert asyncio.run(_ticks(node, clock)) == [0]
    clock.now = START + timedelta(hours=1)
    assert asyncio.run(_ticks(node, clock)) == [1]


def test_a_restart_catches_up_from_the_stored_watermark(database_url):
    """R52: the watermark survives a redeploy; the missed latest occurrence fires."""
    registry = _app(database_url)
    clock = Clock(START + timedelta(seconds=1))
    first = Scheduler(registry, database_url, clock=clock, holder="node")
    asyncio.run(_ticks(first, clock))  # arms at 12:00:01, nothing owed
    clock.now = START + timedelta(hours=2, minutes=5)  # down for two hours
    second = Scheduler(registry, database_url, clock=clock, holder="node")  # the same node, back
    assert asyncio.run(_ticks(second, clock)) == [1]
    assert _jobs(database_url) == ["2026-06-01T14:00:00+00:00"]


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
    assert len(_jobs(database_url)) == 1
    assert (fires[0].task, fires[0].last_fired_occurrence) == ("t", START)


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
    assert len(_jobs(database_url)) == 1


def test_a_scheduled_fire_and_a_manual_fire_are_two_jobs(database_url):
    registry = _app(database_url)
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


def test_a_paused_task_passes_its_occurrences_without_firing(database_url):
    registry = _app(database_url)
    _set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("select jobs.pause_task('hourly')")
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    asyncio.run(_ticks(node, clock))
    assert _jobs(database_url) == []
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("select jobs.resume_task('hourly')")
    clock.now = START + timedelta(hours=1, minutes=1)
    asyncio.run(_ticks(node, clock))
    assert _jobs(database_url) == ["2026-06-01T13:00:00+00:00"]


# -- leadership -----------------------------------------------------------------------------------


def test_two_schedulers_elect_one_leader_and_only_it_fires(database_url):
    """R51: a lease row, not a session advisory lock, so a pool cannot make both lead."""
    registry = _app(database_url)
    _set_watermark(database_url, "hourly", START - timedelta(minutes=30))
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
    assert len(_jobs(database_url)) == 1


def test_a_leader_killed_mid_round_is_replaced_without_a_double_fire(database_url):
    """A leader that died (no resign) is replaced once its lease lapses; the new leader fires
    what is owed and nothing the dead one already fired."""
    registry = _app(database_url, tasks=2)
    for task in ("hourly-0", "hourly-1"):
        _set_watermark(database_url, task, START - timedelta(minutes=30))
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
                _run_sql,
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
    assert len(_jobs(database_url)) == 2


def test_a_demoted_node_stops_mid_round(database_url):
    """R98: still_leading() is asked before every fire."""
    registry = _app(database_url, tasks=3)
    for n in range(3):
        _set_watermark(database_url, f"hourly-{n}", START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    node = Scheduler(registry, database_url, clock=clock, holder="node")
    real_run = node.db.run

    async def lease_runs_out_after_first_fire(call):
        answer = await real_run(call)
        if call.function == "jobs.scheduler_fire":
            clock.now += timedelta(minutes=5)  # the round stalled past the lease
        return answer

    node.db.run = lease_runs_out_after_first_fire  # type: ignore[method-assign]
    assert asyncio.run(_ticks(node, clock)) == [1]
    assert len(_jobs(database_url)) == 1


def test_an_idle_minute_costs_seven_statements_whatever_the_tasks(database_url):
    """R53: watermarks live in memory while leading; only the lease is renewed, and the
    counters are rolled up once."""
    registry = _app(database_url, tasks=35)
    clock = Clock(START + timedelta(seconds=1))
    node = Scheduler(registry, database_url, clock=clock, holder="idle")
    statements: list[str] = []
    real_run = node.db.run

    async def counting(call):
        statements.append(call.function)
        return await real_run(call)

    node.db.run = counting  # type: ignore[method-assign]
    asyncio.run(_ticks(node, clock, count=1))  # the first round arms the 35 tasks
    armed = len(statements)
    asyncio.run(_ticks(node, clock, count=60))  # one idle minute, a tick a second
    idle = statements[armed:]
    assert sorted(idle) == ["jobs.rollup_counters"] + ["jobs.scheduler_lead"] * 6


# -- daylight saving ------------------------------------------------------------------------------


def test_a_local_time_skipped_in_spring_fires_once_after_the_gap():
    registry = durajobs.Registry()
    task = registry.task(name="t", cron="30 2 * * *", tz="America/New_York")(lambda o: [])
    before = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    fires = [task.next_run(before)]
    fires.append(task.next_run(fires[0]))
    local = [f.astimezone(task.tz).strftime("%m-%d %H:%M %z") for f in fires]
    assert local == ["03-08 03:00 -0400", "03-09 02:30 -0400"]


def test_a_local_time_repeated_in_autumn_fires_once():
    registry = durajobs.Registry()
    daily = registry.task(name="d", cron="30 1 * * *", tz="America/New_York")(lambda o: [])
    before = datetime(2026, 10, 31, 16, 0, tzinfo=UTC)
    first = daily.next_run(before)
    second = daily.next_run(first)
    assert first.astimezone(daily.tz).strftime("%m-%d %H:%M %z") == "11-01 01:30 -0400"
    assert second.astimezone(daily.tz).strftime("%m-%d %H:%M %z") == "11-02 01:30 -0500"
    half_hourly = registry.task(name="h", cron="*/30 * * * *", tz="America/New_York")(lambda o: [])
    moment = datetime(2026, 11, 1, 4, 50, tzinfo=UTC)  # 00:50 EDT
    local = []
    for _ in range(5):
        moment = half_hourly.next_run(moment)
        local.append(moment.astimezone(half_hourly.tz).strftime("%H:%M %z"))
    assert local == ["01:00 -0400", "01:30 -0400", "02:00 -0500", "02:30 -0500", "03:00 -0500"]


def test_a_standby_asks_for_the_lease_at_the_renewal_interval_only(database_url):
    registry = _app(database_url)
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


def test_a_broken_task_does_not_stop_the_others(database_url, caplog):
    import logging

    registry = _app(database_url)
    registry.task(name="a-broken", cron="0 * * * *", tz="UTC")(
        lambda occurrence: [(registry.get("report"), {"at": 5})]  # the job refuses this input
    )
    for task in ("a-broken", "hourly"):
        _set_watermark(database_url, task, START - timedelta(minutes=30))
    clock = Clock(START + timedelta(minutes=1))
    with caplog.at_level(logging.ERROR, logger="durajobs"):
        fired = asyncio.run(_ticks(Scheduler(registry, database_url, clock=clock), clock))
    assert fired == [1]  # 'hourly', after the broken task in name order, still fired
    assert _jobs(database_url) == ["2026-06-01T12:00:00+00:00"]
    assert any(r.getMessage() == "jobs.scheduler.task-failed" for r in caplog.records)


def test_a_leader_whose_lease_ran_out_reads_the_watermarks_again(database_url):
    """Another node may have fired while this one stalled: its memory is stale."""
    registry = _app(database_url, catch_up="run-once")
    _set_watermark(database_url, "hourly", START - timedelta(minutes=30))
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


def test_a_zone_abbreviation_is_not_answered_with_a_fixed_offset_zone():
    with pytest.raises(DeclarationInvalid) as refused:
        durajobs.Registry().task(name="t", cron="0 9 * * *", tz="CEST")
    assert all("/" in zone for zone in refused.value.detail["suggestions"])


def test_the_leader_runs_maintenance_once_a_minute_and_standbys_never(database_url):
    registry = _app(database_url)
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
    registry = _app(database_url, catch_up="skip", cron="*/5 * * * *")
    (task,) = registry.tasks()
    fires = task.due(START - timedelta(days=365), START + timedelta(minutes=7))
    assert fires == [(START + timedelta(minutes=5), START + timedelta(minutes=5))]
    assert evaluations["count"] <= 40  # a year of */5 is 105,120 occurrences


def test_an_abandoned_round_keeps_the_lease(database_url):
    """R55: releasing it would let a standby fire while the round may still be dispatching."""
    registry = _app(database_url)
    _set_watermark(database_url, "hourly", START - timedelta(minutes=30))
    node = Scheduler(
        registry, database_url, clock=Clock(START + timedelta(minutes=1)), holder="abandoned"
    )
    real_run = node.db.run

    async def hanging_fire(call):
        if call.function == "jobs.scheduler_fire":
            await asyncio.Event().wait()
        return await real_run(call)

    node.db.run = hanging_fire  # type: ignore[method-assign]

    async def scenario():
        running = asyncio.ensure_future(node.run())
        while not node.leading:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        running.cancel()  # the drain deadline passed mid-round
        await asyncio.gather(running, return_exceptions=True)

    asyncio.run(scenario())
    with psycopg.connect(database_url, autocommit=True) as connection:
        holders = connection.execute("select holder from jobs.scheduler_leases").fetchall()
    assert holders == [("abandoned",)]


def test_a_cancel_a_round_dropped_still_stops_the_scheduler(database_url):
    # a round waits for pooled connections, whose wait can drop a cancel: the scheduler ticked on
    registry = _app(database_url)
    node = Scheduler(registry, database_url, clock=Clock(START), holder="dropped", tick="50ms")
    dropper = CancelDropper()
    node.tick_once = dropper.ahead_of(node.tick_once)  # type: ignore[method-assign]

    ended, cancelled = cancel_once_while_parked(node.run, dropper)
    assert dropper.dropped
    assert ended, "the scheduler ticked on after its one cancel was dropped"
    assert cancelled


def test_two_schedulers_on_one_pool_still_elect_one_leader(database_url):
    """R51: a session-scoped advisory lock would let both lead through one pool."""
    registry = _app(database_url)
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


def test_a_scheduler_across_the_spring_switch_fires_the_moved_occurrence(database_url):
    registry = durajobs.Registry(database_url=database_url)

    @registry.job(name="report", input=Report, idempotency_key=lambda r: r.at, tenant="none")
    async def report(ctx):
        return None

    registry.task(name="night", cron="30 2 * * *", tz="America/New_York")(
        lambda occurrence: [(report, {"at": occurrence.isoformat()})]
    )
    (task,) = registry.tasks()
    switch_day = datetime(2026, 3, 8, 7, 5, tzinfo=UTC)  # 03:05 EDT, just after the gap
    assert task.latest_at_or_before(switch_day) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    _set_watermark(database_url, "night", datetime(2026, 3, 7, 7, 30, tzinfo=UTC))
    clock = Clock(switch_day)
    assert asyncio.run(_ticks(Scheduler(registry, database_url, clock=clock), clock)) == [1]
    assert _jobs(database_url) == ["2026-03-08T07:00:00+00:00"]  # 03:00 EDT, once


def test_latest_at_or_before_skips_the_repeated_autumn_time():
    registry = durajobs.Registry()
    daily = registry.task(name="d", cron="30 1 * * *", tz="America/New_York")(lambda o: [])
    after_both = datetime(2026, 11, 1, 7, 0, tzinfo=UTC)  # 02:00 EST, after the second 01:30
    assert daily.latest_at_or_before(after_both) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)


def test_an_enqueue_function_that_answers_an_awaitable_is_refused(database_url):
    registry = _app(database_url)

    async def coroutine():
        return []

    task = registry.task(name="sneaky", cron="0 * * * *", tz="UTC")(lambda o: coroutine())
    with pytest.raises(DeclarationInvalid):
        task.requests(START)
